"""Colormaps shared by the volume and surface renderers.

A colormap is a table of RGB samples evenly spaced over [0, 1], named by a string:

- insitu's maps: 256 samples stored as 8-bit hex (display precision). viridis, plasma,
  inferno, magma and cividis (van der Walt, Smith, Nunez; CC0) and coolwarm (Moreland's
  diverging map) were sampled from matplotlib 3.11.2's ``colormaps[name].resampled(256)``,
  rounded to the nearest 1/255; grayscale is a ramp.
- VTK-m's presets (the names Ascent users write: "Cool to Warm", "Jet", ...), from VTK-m's
  control points (render/_vtkm_presets.py) interpolated in the preset's colour space as
  VTK-m does (RGB, CIELAB, or Moreland's diverging Msh space), sampled at 1024 points.
- tables from control points (Ascent's ``color_table: {control_points: ...}``):
  :func:`compose` returns a name that spells the points out (``"table:{...}"``), so the
  name is the table wherever it goes (another process, a cache key) and two equal tables
  have one name. Alpha control points ride along for volume plots (:func:`alpha_points`).

Every table reaches a device once per contents (:func:`device_copy`, shared with the
volume transfer functions), so the GPU kernels take any table as an argument.
"""

from __future__ import annotations

import difflib
import functools
import hashlib
import json
from typing import Sequence

import numpy as np

from insitu import arrays

from ._vtkm_presets import PRESETS as _PRESETS

__all__ = ["NAMES", "PRESETS", "SPACES", "alpha_points", "colormap", "compose", "device_copy", "evaluate", "index",
           "name_at", "resolve", "table"]

_HEX = {
    "viridis": (
        "44015444025645045745055946075a46085c460a5d460b5e470d60470e61471063471164471365481467481668481769"
        "48186a481a6c481b6d481c6e481d6f481f70482071482173482374482475482576482677482878482979472a7a472c7a"
        "472d7b472e7c472f7d46307e46327e46337f463480453581453781453882443983443a83443b84433d84433e85423f85"
        "4240864241864142874144874045884046883f47883f48893e49893e4a893e4c8a3d4d8a3d4e8a3c4f8a3c508b3b518b"
        "3b528b3a538b3a548c39558c39568c38588c38598c375a8c375b8d365c8d365d8d355e8d355f8d34608d34618d33628d"
        "33638d32648e32658e31668e31678e31688e30698e306a8e2f6b8e2f6c8e2e6d8e2e6e8e2e6f8e2d708e2d718e2c718e"
        "2c728e2c738e2b748e2b758e2a768e2a778e2a788e29798e297a8e297b8e287c8e287d8e277e8e277f8e27808e26818e"
        "26828e26828e25838e25848e25858e24868e24878e23888e23898e238a8d228b8d228c8d228d8d218e8d218f8d21908d"
        "21918c20928c20928c20938c1f948c1f958b1f968b1f978b1f988b1f998a1f9a8a1e9b8a1e9c891e9d891f9e891f9f88"
        "1fa0881fa1881fa1871fa28720a38620a48621a58521a68522a78522a88423a98324aa8325ab8225ac8226ad8127ad81"
        "28ae8029af7f2ab07f2cb17e2db27d2eb37c2fb47c31b57b32b67a34b67935b77937b87838b9773aba763bbb753dbc74"
        "3fbc7340bd7242be7144bf7046c06f48c16e4ac16d4cc26c4ec36b50c46a52c56954c56856c66758c7655ac8645cc863"
        "5ec96260ca6063cb5f65cb5e67cc5c69cd5b6ccd5a6ece5870cf5773d05675d05477d1537ad1517cd2507fd34e81d34d"
        "84d44b86d54989d5488bd6468ed64590d74393d74195d84098d83e9bd93c9dd93ba0da39a2da37a5db36a8db34aadc32"
        "addc30b0dd2fb2dd2db5de2bb8de29bade28bddf26c0df25c2df23c5e021c8e020cae11fcde11dd0e11cd2e21bd5e21a"
        "d8e219dae319dde318dfe318e2e418e5e419e7e419eae51aece51befe51cf1e51df4e61ef6e620f8e621fbe723fde725"
    ),
    "plasma": (
        "0d088710078813078916078a19068c1b068d1d068e20068f2206902406912605912805922a05932c05942e05952f0596"
        "31059733059735049837049938049a3a049a3c049b3e049c3f049c41049d43039e44039e46039f48039f4903a04b03a1"
        "4c02a14e02a25002a25102a35302a35502a45601a45801a45901a55b01a55c01a65e01a66001a66100a76300a76400a7"
        "6600a76700a86900a86a00a86c00a86e00a86f00a87100a87201a87401a87501a87701a87801a87a02a87b02a87d03a8"
        "7e03a88004a88104a78305a78405a78606a68707a68808a68a09a58b0aa58d0ba58e0ca48f0da4910ea3920fa39410a2"
        "9511a19613a19814a099159f9a169f9c179e9d189d9e199da01a9ca11b9ba21d9aa31e9aa51f99a62098a72197a82296"
        "aa2395ab2494ac2694ad2793ae2892b02991b12a90b22b8fb32c8eb42e8db52f8cb6308bb7318ab83289ba3388bb3488"
        "bc3587bd3786be3885bf3984c03a83c13b82c23c81c33d80c43e7fc5407ec6417dc7427cc8437bc9447aca457acb4679"
        "cc4778cc4977cd4a76ce4b75cf4c74d04d73d14e72d24f71d35171d45270d5536fd5546ed6556dd7566cd8576bd9586a"
        "da5a6ada5b69db5c68dc5d67dd5e66de5f65de6164df6263e06363e16462e26561e26660e3685fe4695ee56a5de56b5d"
        "e66c5ce76e5be76f5ae87059e97158e97257ea7457eb7556eb7655ec7754ed7953ed7a52ee7b51ef7c51ef7e50f07f4f"
        "f0804ef1814df1834cf2844bf3854bf3874af48849f48948f58b47f58c46f68d45f68f44f79044f79143f79342f89441"
        "f89540f9973ff9983ef99a3efa9b3dfa9c3cfa9e3bfb9f3afba139fba238fca338fca537fca636fca835fca934fdab33"
        "fdac33fdae32fdaf31fdb130fdb22ffdb42ffdb52efeb72dfeb82cfeba2cfebb2bfebd2afebe2afec029fdc229fdc328"
        "fdc527fdc627fdc827fdca26fdcb26fccd25fcce25fcd025fcd225fbd324fbd524fbd724fad824fada24f9dc24f9dd25"
        "f8df25f8e125f7e225f7e425f6e626f6e826f5e926f5eb27f4ed27f3ee27f3f027f2f227f1f426f1f525f0f724f0f921"
    ),
    "inferno": (
        "00000401000501010601010802010a02020c02020e03021004031204031405041706041907051b08051d09061f0a0722"
        "0b07240c08260d08290e092b10092d110a30120a32140b34150b37160b39180c3c190c3e1b0c411c0c431e0c451f0c48"
        "210c4a230c4c240c4f260c51280b53290b552b0b572d0b592f0a5b310a5c320a5e340a5f3609613809623909633b0964"
        "3d09653e0966400a67420a68440a68450a69470b6a490b6a4a0c6b4c0c6b4d0d6c4f0d6c510e6c520e6d540f6d550f6d"
        "57106e59106e5a116e5c126e5d126e5f136e61136e62146e64156e65156e67166e69166e6a176e6c186e6d186e6f196e"
        "71196e721a6e741a6e751b6e771c6d781c6d7a1d6d7c1d6d7d1e6d7f1e6c801f6c82206c84206b85216b87216b88226a"
        "8a226a8c23698d23698f24699025689225689326679526679727669827669a28659b29649d29649f2a63a02a63a22b62"
        "a32c61a52c60a62d60a82e5fa92e5eab2f5ead305dae305cb0315bb1325ab3325ab43359b63458b73557b93556ba3655"
        "bc3754bd3853bf3952c03a51c13a50c33b4fc43c4ec63d4dc73e4cc83f4bca404acb4149cc4248ce4347cf4446d04545"
        "d24644d34743d44842d54a41d74b3fd84c3ed94d3dda4e3cdb503bdd513ade5238df5337e05536e15635e25734e35933"
        "e45a31e55c30e65d2fe75e2ee8602de9612bea632aeb6429eb6628ec6726ed6925ee6a24ef6c23ef6e21f06f20f1711f"
        "f1731df2741cf3761bf37819f47918f57b17f57d15f67e14f68013f78212f78410f8850ff8870ef8890cf98b0bf98c0a"
        "f98e09fa9008fa9207fa9407fb9606fb9706fb9906fb9b06fb9d07fc9f07fca108fca309fca50afca60cfca80dfcaa0f"
        "fcac11fcae12fcb014fcb216fcb418fbb61afbb81dfbba1ffbbc21fbbe23fac026fac228fac42afac62df9c72ff9c932"
        "f9cb35f8cd37f8cf3af7d13df7d340f6d543f6d746f5d949f5db4cf4dd4ff4df53f4e156f3e35af3e55df2e661f2e865"
        "f2ea69f1ec6df1ed71f1ef75f1f179f2f27df2f482f3f586f3f68af4f88ef5f992f6fa96f8fb9af9fc9dfafda1fcffa4"
    ),
    "magma": (
        "00000401000501010601010802010902020b02020d03030f03031204041405041606051806051a07061c08071e090720"
        "0a08220b09240c09260d0a290e0b2b100b2d110c2f120d31130d34140e36150e38160f3b180f3d19103f1a10421c1044"
        "1d11471e114920114b21114e22115024125325125527125829115a2a115c2c115f2d11612f1163311165331067341069"
        "36106b38106c390f6e3b0f703d0f713f0f72400f74420f75440f764510774710784910784a10794c117a4e117b4f127b"
        "51127c52137c54137d56147d57157e59157e5a167e5c167f5d177f5f187f601880621980641a80651a80671b80681c81"
        "6a1c816b1d816d1d816e1e81701f81721f817320817521817621817822817922827b23827c23827e2482802582812581"
        "8326818426818627818827818928818b29818c29818e2a81902a81912b81932b80942c80962c80982d80992d809b2e7f"
        "9c2e7f9e2f7fa02f7fa1307ea3307ea5317ea6317da8327daa337dab337cad347cae347bb0357bb2357bb3367ab5367a"
        "b73779b83779ba3878bc3978bd3977bf3a77c03a76c23b75c43c75c53c74c73d73c83e73ca3e72cc3f71cd4071cf4070"
        "d0416fd2426fd3436ed5446dd6456cd8456cd9466bdb476adc4869de4968df4a68e04c67e24d66e34e65e44f64e55064"
        "e75263e85362e95462ea5661eb5760ec5860ed5a5fee5b5eef5d5ef05f5ef1605df2625df2645cf3655cf4675cf4695c"
        "f56b5cf66c5cf66e5cf7705cf7725cf8745cf8765cf9785df9795df97b5dfa7d5efa7f5efa815ffb835ffb8560fb8761"
        "fc8961fc8a62fc8c63fc8e64fc9065fd9266fd9467fd9668fd9869fd9a6afd9b6bfe9d6cfe9f6dfea16efea36ffea571"
        "fea772fea973feaa74feac76feae77feb078feb27afeb47bfeb67cfeb77efeb97ffebb81febd82febf84fec185fec287"
        "fec488fec68afec88cfeca8dfecc8ffecd90fecf92fed194fed395fed597fed799fed89afdda9cfddc9efddea0fde0a1"
        "fde2a3fde3a5fde5a7fde7a9fde9aafdebacfcecaefceeb0fcf0b2fcf2b4fcf4b6fcf6b8fcf7b9fcf9bbfcfbbdfcfdbf"
    ),
    "cividis": (
        "00224e00234f00245100255300255400265600275800285900285b00295d002a5f002a61002b62002c64002c66002d68"
        "002e6a002e6c002f6d00306f0030700031700031710132710533710833700c34700f357012357014367016377018376f"
        "1a386f1c396f1e3a6f203a6f213b6e233c6e243c6e263d6e273e6e293f6e2a3f6d2b406d2d416d2e416d2f426d31436d"
        "32436d33446d34456c35456c36466c38476c39486c3a486c3b496c3c4a6c3d4a6c3e4b6c3f4c6c404c6c414d6c424e6c"
        "434e6c444f6c45506c46516c47516c48526c49536c4a536c4b546c4c556c4d556c4e566c4f576c50576c51586d52596d"
        "535a6d545a6d555b6d555c6d565c6d575d6d585e6d595e6e5a5f6e5b606e5c616e5d616e5e626e5e636f5f636f60646f"
        "61656f62656f636670646770656870656870666970676a71686a71696b716a6c716b6d726c6d726c6e726d6f726e6f73"
        "6f70737071737172747272747273747374757474757575757676767777767777777878777979777a7a787b7a787c7b78"
        "7d7c787e7c787e7d787f7e78807f78817f788280798381798482798582798683798784788885788985788a86788b8778"
        "8c88788d88788e89788f8a78908b78918b78928c78928d78938e78948e77958f779690779791779892779992779a9376"
        "9b94769c95769d95769e96769f9775a09875a19975a29975a39a74a49b74a59c74a69c74a79d73a89e73a99f73aaa073"
        "aba072aca172ada272aea371afa471b0a571b1a570b3a670b4a76fb5a86fb6a96fb7a96eb8aa6eb9ab6dbaac6dbbad6d"
        "bcae6cbdae6cbeaf6bbfb06bc0b16ac1b26ac2b369c3b369c4b468c5b568c6b667c7b767c8b866c9b965cbb965ccba64"
        "cdbb63cebc63cfbd62d0be62d1bf61d2c060d3c05fd4c15fd5c25ed6c35dd7c45cd9c55cdac65bdbc75adcc859ddc858"
        "dec958dfca57e0cb56e1cc55e2cd54e4ce53e5cf52e6d051e7d150e8d24fe9d34eead34cebd44bedd54aeed649efd748"
        "f0d846f1d945f2da44f3db42f5dc41f6dd3ff7de3ef8df3cf9e03afbe138fce236fde334fee434fee535fee636fee838"
    ),
    "coolwarm": (
        "3b4cc03c4ec23d50c33e51c53f53c64055c84257c94358cb445acc455cce465ecf485fd14961d24a63d34b64d54c66d6"
        "4e68d84f69d9506bda516ddb536edd5470de5572df5673e05875e15977e35a78e45b7ae55d7ce65e7de75f7fe86180e9"
        "6282ea6384eb6485ec6687ed6788ee688aef6a8bef6b8df06c8ff16e90f26f92f37093f37295f47396f57597f67699f6"
        "779af7799cf87a9df87b9ff97da0f97ea1fa80a3fa81a4fb82a6fb84a7fc85a8fc86a9fc88abfd89acfd8badfd8caffe"
        "8db0fe8fb1fe90b2fe92b4fe93b5fe94b6ff96b7ff97b8ff98b9ff9abbff9bbcff9dbdff9ebeff9fbfffa1c0ffa2c1ff"
        "a3c2fea5c3fea6c4fea7c5fea9c6fdaac7fdabc8fdadc9fdaec9fcafcafcb1cbfcb2ccfbb3cdfbb5cdfab6cefab7cff9"
        "b9d0f9bad0f8bbd1f8bcd2f7bed2f6bfd3f6c0d4f5c1d4f4c3d5f4c4d5f3c5d6f2c6d6f1c7d7f0c9d7f0cad8efcbd8ee"
        "ccd9edcdd9eccedaebcfdaead1dae9d2dbe8d3dbe7d4dbe6d5dbe5d6dce4d7dce3d8dce2d9dce1dadce0dbdcdedcdddd"
        "dddcdcdedcdbdfdbd9e0dbd8e1dad6e2dad5e3d9d3e4d9d2e5d8d1e6d7cfe7d7cee8d6cce9d5cbead5c9ead4c8ebd3c6"
        "ecd3c5edd2c3edd1c2eed0c0efcfbfefcebdf0cdbbf1cdbaf1ccb8f2cbb7f2cab5f2c9b4f3c8b2f3c7b1f4c6aff4c5ad"
        "f5c4acf5c2aaf5c1a9f5c0a7f6bfa6f6bea4f6bda2f7bca1f7ba9ff7b99ef7b89cf7b79bf7b599f7b497f7b396f7b194"
        "f7b093f7af91f7ad90f7ac8ef7aa8cf7a98bf7a889f7a688f6a586f6a385f6a283f5a081f59f80f59d7ef59c7df49a7b"
        "f4987af39778f39577f39475f29274f29072f18f71f18d6ff08b6ef08a6cef886bee8669ee8468ed8366ec8165ec7f63"
        "eb7d62ea7b60e97a5fe9785de8765ce7745be67259e57058e46e56e36c55e36b54e26952e16751e0654fdf634ede614d"
        "dd5f4bdc5d4ada5a49d95847d85646d75445d65244d55042d44e41d24b40d1493fd0473dcf453ccd423bcc403acb3e38"
        "ca3b37c83836c73635c53334c43032c32e31c12b30c0282fbe242ebd1f2dbb1b2cba162bb8122ab70d28b50927b40426"
    ),
}

#: VTK-m's preset names (Ascent's colour table names), in VTK-m's order.
PRESETS: tuple[str, ...] = tuple(_PRESETS)
#: Names :func:`colormap` and :func:`table` accept besides :func:`compose`'s; declared to the
#: runtime as the entry point ``render`` of the group ``insitu.colormaps`` (the viewer offers them).
NAMES: tuple[str, ...] = tuple(_HEX) + ("grayscale",) + PRESETS
#: Colour spaces control points are interpolated in (VTK-m's, less HSV).
SPACES = ("rgb", "lab", "diverging")
#: Samples of a table made from control points (VTK-m's presets and :func:`compose`'s).
POINT_SAMPLES = 1024
#: Other names Ascent's documentation uses: VTK-m's "Default" preset, and gray for grayscale.
_ALIASES = {"default": "Viridis", "gray": "grayscale", "grey": "grayscale"}
_PREFIX = "table:"


def _key(name: str) -> str:
    # VTK-m compares names ignoring case; Ascent's documentation also writes them without spaces.
    return "".join(name.split()).lower()


_BY_KEY = {_key(n): n for n in reversed(NAMES)}  # insitu's own name first where they clash (viridis)
_BY_KEY.update({_key(k): v for k, v in _ALIASES.items()})


def resolve(name: str) -> str:
    """The canonical name of colormap `name`: one of :data:`NAMES` (exactly, or ignoring case
    and spaces as VTK-m and Ascent do), or a :func:`compose` name (checked).

    Raises
    ------
    ValueError
        An unknown name; the message lists the close matches.
    """
    if not isinstance(name, str):
        raise ValueError(f"colormap name: expected a string, got {type(name).__name__}")
    if name in NAMES:
        return name
    if name.startswith(_PREFIX):
        _spec(name)
        return name
    found = _BY_KEY.get(_key(name))
    if found is not None:
        return found
    close = difflib.get_close_matches(_key(name), list(_BY_KEY), n=4, cutoff=0.5)
    hint = (f"; close: {', '.join(repr(_BY_KEY[c]) for c in close)}" if close else "")
    raise ValueError(f"colormap name: unknown {name!r}{hint}; known: {', '.join(NAMES)}")


# ---- colour spaces, as VTK-m's ColorTable interpolates (vtkm/exec/ColorTable.hxx) ---------------

_WHITE = np.array([0.9505, 1.0, 1.089])  # D65, 2 degrees
_TO_XYZ = np.array([[0.4124, 0.3576, 0.1805], [0.2126, 0.7152, 0.0722], [0.0193, 0.1192, 0.9505]])
_TO_RGB = np.array([[3.2406, -1.5372, -0.4986], [-0.9689, 1.8758, 0.0415], [0.0557, -0.2040, 1.0570]])


def _rgb_to_lab(rgb: np.ndarray) -> np.ndarray:
    lin = np.where(rgb > 0.04045, ((rgb + 0.055) / 1.055) ** 2.4, rgb / 12.92)  # sRGB decoding
    v = (lin @ _TO_XYZ.T) / _WHITE
    f = np.where(v > 0.008856, np.cbrt(v), 7.787 * v + 16.0 / 116.0)
    return np.stack([116.0 * f[..., 1] - 16.0, 500.0 * (f[..., 0] - f[..., 1]), 200.0 * (f[..., 1] - f[..., 2])], -1)


def _lab_to_rgb(lab: np.ndarray) -> np.ndarray:
    fy = (lab[..., 0] + 16.0) / 116.0
    f = np.stack([lab[..., 1] / 500.0 + fy, fy, fy - lab[..., 2] / 200.0], -1)
    xyz = np.where(f ** 3 > 0.008856, f ** 3, (f - 16.0 / 116.0) / 7.787) * _WHITE
    lin = xyz @ _TO_RGB.T
    rgb = np.where(lin > 0.0031308, 1.055 * np.abs(lin) ** (1 / 2.4) - 0.055, 12.92 * lin)
    top = rgb.max(axis=-1, keepdims=True)  # out of gamut: scaled down into it, then clipped at 0
    rgb = np.where(top > 1.0, rgb / np.maximum(top, 1.0), rgb)
    return np.maximum(rgb, 0.0)


def _lab_to_msh(lab: np.ndarray) -> np.ndarray:
    m = np.sqrt((lab ** 2).sum(-1))
    s = np.where(m > 0.001, np.arccos(np.clip(lab[..., 0] / np.maximum(m, 1e-300), -1, 1)), 0.0)
    h = np.where(s > 0.001, np.arctan2(lab[..., 2], lab[..., 1]), 0.0)
    return np.stack([m, s, h], -1)


def _msh_to_lab(msh: np.ndarray) -> np.ndarray:
    m, s, h = msh[..., 0], msh[..., 1], msh[..., 2]
    return np.stack([m * np.cos(s), m * np.sin(s) * np.cos(h), m * np.sin(s) * np.sin(h)], -1)


def _adjust_hue(msh: np.ndarray, unsat_m: np.ndarray) -> np.ndarray:
    """Moreland's hue for an unsaturated end, spun from the saturated end `msh`."""
    m, s, h = msh[..., 0], msh[..., 1], msh[..., 2]
    with np.errstate(all="ignore"):
        spin = s * np.sqrt(np.maximum(unsat_m ** 2 - m ** 2, 0.0)) / (m * np.sin(s))
    return np.where(m >= unsat_m - 0.1, h, np.where(h > -0.3 * np.pi, h + spin, h - spin))


def _diverging(c0: np.ndarray, c1: np.ndarray, w: np.ndarray) -> np.ndarray:
    a, b = _lab_to_msh(_rgb_to_lab(c0)), _lab_to_msh(_rgb_to_lab(c1))
    d = np.abs(a[:, 2] - b[:, 2]) % (2 * np.pi)
    d = np.where(d > np.pi, 2 * np.pi - d, d)
    split = (a[:, 1] > 0.05) & (b[:, 1] > 0.05) & (d > 0.33 * np.pi)  # distinct saturated ends: white between
    mid = np.maximum(np.maximum(a[:, 0], b[:, 0]), 88.0)
    low = split & (w < 0.5)
    high = split & ~(w < 0.5)
    white = np.stack([mid, np.zeros_like(mid), np.zeros_like(mid)], -1)
    b = np.where(low[:, None], white, b)
    a = np.where(high[:, None], white, a)
    w = np.where(low, 2 * w, np.where(high, 2 * w - 1, w))
    a_un, b_un = a[:, 1] < 0.05, b[:, 1] < 0.05
    a[:, 2] = np.where(a_un & ~b_un, _adjust_hue(b, a[:, 0]), a[:, 2])
    b[:, 2] = np.where(b_un & ~a_un, _adjust_hue(a, b[:, 0]), b[:, 2])
    return _lab_to_rgb(_msh_to_lab((1 - w)[:, None] * a + w[:, None] * b))


def evaluate(points, x, space: str = "rgb") -> np.ndarray:
    """RGB of control points `points` at positions `x`, interpolated in colour space `space`.

    Parameters
    ----------
    points : (N, 4) array
        ``(position, r, g, b)`` rows, positions not decreasing, components in [0, 1].
    x : (M,) array
        Positions; clamped to the first and last point's.
    space : {"rgb", "lab", "diverging"}
        As VTK-m's ColorTable: linear in RGB, in CIELAB, or in Moreland's Msh with white
        between distinct saturated colours.

    Returns
    -------
    (M, 3) float64
    """
    if space not in SPACES:
        raise ValueError(f"colour space: expected one of {', '.join(SPACES)}, got {space!r}")
    p = np.asarray(points, np.float64)
    x = np.clip(np.asarray(x, np.float64), p[0, 0], p[-1, 0])
    if len(p) == 1:
        return np.repeat(p[:, 1:], len(x), axis=0)
    k = np.clip(np.searchsorted(p[:, 0], x, side="right") - 1, 0, len(p) - 2)
    span = p[k + 1, 0] - p[k, 0]
    w = np.where(span > 0, (x - p[k, 0]) / np.where(span > 0, span, 1.0), 0.0)
    c0, c1 = p[k, 1:], p[k + 1, 1:]
    if space == "rgb":
        return c0 + (c1 - c0) * w[:, None]
    if space == "lab":
        a, b = _rgb_to_lab(c0), _rgb_to_lab(c1)
        return _lab_to_rgb(a + (b - a) * w[:, None])
    return _diverging(c0, c1, w)


# ---- names and tables ---------------------------------------------------------------------------

def _preset(name: str) -> tuple[np.ndarray, str]:
    space, flat = _PRESETS[name]
    return np.array(flat.split(), np.float64).reshape(-1, 4), space


def _base_points(name: str) -> tuple[np.ndarray, str]:
    """Control points and colour space of a named map (insitu's: its samples, in RGB)."""
    if name in _PRESETS:
        return _preset(name)
    rgb = table(name).astype(np.float64)
    return np.column_stack([np.linspace(0.0, 1.0, len(rgb)), rgb]), "rgb"


def _merge(old: np.ndarray, new: np.ndarray) -> np.ndarray:
    """`old` points with `new` added (VTK-m's AddPoint: a point at an existing position replaces it)."""
    keep = ~np.isin(old[:, 0], new[:, 0])
    out = np.concatenate([old[keep], new])
    return out[np.argsort(out[:, 0], kind="stable")]


def _points(given, what: str, width: int) -> np.ndarray:
    try:
        p = np.array(given, np.float64).reshape(-1, width)
    except (TypeError, ValueError):
        raise ValueError(f"{what}: expected rows of {width} numbers, got {given!r}") from None
    if len(p) == 0 or not np.isfinite(p).all():
        raise ValueError(f"{what}: expected at least one row of {width} finite numbers")
    if (p[:, 0] < 0).any() or (p[:, 0] > 1).any():
        raise ValueError(f"{what}: positions must lie in [0, 1] (normalized over the colour range), "
                         f"got {p[:, 0].tolist()}")
    p[:, 1:] = np.clip(p[:, 1:], 0.0, 1.0)  # as Ascent clamps components
    return p[np.argsort(p[:, 0], kind="stable")]


def compose(name: str | None = None, rgb: Sequence | None = None, alpha: Sequence | None = None, *,
            reverse: bool = False) -> str:
    """The name of a table made as Ascent makes one from ``color_table``.

    Parameters
    ----------
    name : str, optional
        The table to start from (:func:`resolve`); default VTK-m's "Cool to Warm", Ascent's.
    rgb : (N, 4) array_like, optional
        ``(position, r, g, b)`` control points, positions in [0, 1] of the colour range.
        Without `name` they are the colours (the default table cleared, its colour space
        kept: diverging); with `name` they are added to its points.
    alpha : (N, 2) array_like, optional
        ``(position, alpha)`` control points, added to the table's (alpha 1 at 0 and 1);
        volume plots read them (:func:`alpha_points`).
    reverse : bool
        The colours reversed (VTK-m's ReverseColors; alphas stay).

    Returns
    -------
    str
        `name` resolved where nothing changes it, else ``"table:{...}"`` spelling out the
        points and colour space (equal tables, equal names).
    """
    base = resolve(name if name is not None else "Cool to Warm")
    if rgb is None and alpha is None and not reverse:
        return base
    if base.startswith(_PREFIX):
        spec = _spec(base)
        pts, space, alphas = spec["rgb"], spec["space"], spec["alpha"]
    else:
        (pts, space), alphas = _base_points(base), np.array([[0.0, 1.0], [1.0, 1.0]])
    if rgb is not None:
        new = _points(rgb, "control points (rgb)", 4)
        pts = new if name is None else _merge(pts, new)
    if alpha is not None:
        alphas = _merge(alphas, _points(alpha, "control points (alpha)", 2))
    if reverse:
        pts = pts[::-1].copy()
        pts[:, 0] = 1.0 - pts[:, 0]
    body = {"space": space, "rgb": pts.ravel().tolist(), "alpha": np.asarray(alphas).ravel().tolist()}
    return _PREFIX + json.dumps(body, separators=(",", ":"))


@functools.lru_cache(maxsize=64)
def _spec(name: str) -> dict:
    try:
        body = json.loads(name[len(_PREFIX):])
        spec = {"space": body["space"], "rgb": np.array(body["rgb"], np.float64).reshape(-1, 4),
                "alpha": np.array(body["alpha"], np.float64).reshape(-1, 2)}
    except (ValueError, KeyError, TypeError):
        raise ValueError(f"colormap name: {name[:60]!r}... is not a table compose() made") from None
    if spec["space"] not in SPACES or not len(spec["rgb"]) or (np.diff(spec["rgb"][:, 0]) < 0).any():
        raise ValueError(f"colormap name: {name[:60]!r}... is not a table compose() made")
    return spec


def alpha_points(name: str) -> np.ndarray | None:
    """The (N, 2) ``(position, alpha)`` control points of a :func:`compose` table (None for a
    named map: volume plots then use their own opacity)."""
    name = resolve(name)
    return _spec(name)["alpha"].copy() if name.startswith(_PREFIX) else None


@functools.lru_cache(maxsize=64)
def _table(name: str) -> np.ndarray:
    rgb: np.ndarray
    if name == "grayscale":
        rgb = np.repeat(np.linspace(0.0, 1.0, 256, dtype=np.float32)[:, None], 3, axis=1)
    elif name in _HEX:
        rgb = np.frombuffer(bytes.fromhex("".join(_HEX[name])), np.uint8).reshape(256, 3) / np.float32(255)
    else:
        pts, space = _preset(name) if name in _PRESETS else (_spec(name)["rgb"], _spec(name)["space"])
        rgb = np.clip(evaluate(pts, np.linspace(0.0, 1.0, POINT_SAMPLES), space), 0.0, 1.0)
    rgb = np.ascontiguousarray(rgb, dtype=np.float32)
    rgb.flags.writeable = False  # cached and shared: nobody may edit it
    return rgb


def table(name: str) -> np.ndarray:
    """The (N, 3) float32 RGB samples of colormap `name` over [0, 1] (read-only): 256 for
    insitu's maps, :data:`POINT_SAMPLES` for VTK-m's presets and :func:`compose`'s tables.

    Raises
    ------
    ValueError
        `name` is unknown (:func:`resolve`).
    """
    return _table(resolve(name))


_INDEX: dict[str, int] = {}
_NAMES_AT: list[str] = []


def index(name: str) -> int:
    """A small integer standing for colormap `name` in this process (frame parameters are
    numbers): :func:`name_at` gives the name back."""
    name = resolve(name)
    if name not in _INDEX:
        _INDEX[name] = len(_NAMES_AT)
        _NAMES_AT.append(name)
    return _INDEX[name]


def name_at(i) -> str:
    """The colormap :func:`index` numbered `i`."""
    return _NAMES_AT[int(i)]


#: Device copies of tables by (device, contents): a table is uploaded (one counted transfer) the
#: first time its contents are used on a device, whatever object holds them; least recently used
#: ones are dropped past a bound.
_DEVICE_TABLES: dict[tuple[int, bytes], object] = {}
_MAX_DEVICE_TABLES = 64


def device_copy(tab: np.ndarray, device: int):
    """`tab` (a host array) on CUDA `device`, cached by contents (see :data:`_DEVICE_TABLES`)."""
    tab = np.ascontiguousarray(tab)
    key = (device, hashlib.blake2b(tab.tobytes() + str((tab.dtype, tab.shape)).encode(), digest_size=16).digest())
    t = _DEVICE_TABLES.pop(key, None)
    if t is None:
        t = arrays.to_device(tab, device=device)
        if len(_DEVICE_TABLES) >= _MAX_DEVICE_TABLES:
            _DEVICE_TABLES.pop(next(iter(_DEVICE_TABLES)))
    _DEVICE_TABLES[key] = t  # most recently used last
    return t


def colormap(name: str, values, vmin: float, vmax: float):
    """RGBA colours of `values` under colormap `name`, linear between its samples.

    Parameters
    ----------
    name : str
        One of :data:`NAMES` (see :func:`resolve`) or a :func:`compose` name.
    values : array
        Any shape, NumPy or CuPy (the result is on the same backend).
    vmin, vmax : float
        Values mapped to the ends of the map; values outside are clamped to the ends.
        ``vmin == vmax`` maps everything to the low end.

    Returns
    -------
    (..., 4) float32
        ``values.shape + (4,)``: RGB from the map, alpha 1; non-finite values give
        (0, 0, 0, 0).
    """
    tab = table(name)
    v = arrays.asarray(values, name="values")
    vmin, vmax = float(vmin), float(vmax)
    if not (np.isfinite(vmin) and np.isfinite(vmax)) or vmax < vmin:
        raise ValueError(f"colormap vmin, vmax: expected finite vmin <= vmax, got {vmin}, {vmax}")
    xp = arrays.get_array_module(v)
    dev = arrays.device_id(v)
    if dev is not None:
        tab = device_copy(tab, dev)
    n = tab.shape[0]
    scale = (n - 1) / (vmax - vmin) if vmax > vmin else 0.0
    ok = xp.isfinite(v)
    x = xp.clip((xp.where(ok, v, vmin).astype(xp.float64) - vmin) * scale, 0, n - 1)
    i = xp.minimum(x.astype(xp.int64), n - 2)
    f = (x - i).astype(xp.float32)[..., None]
    out = xp.empty(v.shape + (4,), xp.float32)
    out[..., :3] = tab[i] + (tab[i + 1] - tab[i]) * f
    out[..., 3] = 1.0
    out[~ok] = 0.0
    return out
