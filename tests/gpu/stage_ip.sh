#!/bin/bash
# The GPU node has no iproute2, which tests/netns.py needs to make namespace hosts
# (tests/gpu/test_spark_hosts_gpu.py, bench_cross_host.py --gpu). Run here (Debian): copies
# this machine's `ip` and the libraries it links into .device-ip/ (ignored by git); carry
# ".device-ip" with the device call, and tests/gpu/run_spark.sh puts it on PATH.
set -euo pipefail
root=$(git rev-parse --show-toplevel); cd "$root"
grep -qx '/.device-ip/' .git/info/exclude 2>/dev/null || echo '/.device-ip/' >> .git/info/exclude
rm -rf .device-ip && mkdir -p .device-ip/bin .device-ip/lib
ip=$(command -v ip)
cp "$ip" .device-ip/lib/ip.real
ldd "$ip" | awk '/=> \// {print $3}' | grep -v -E '/(libc|libm|libpthread|libdl|ld-linux[^/]*)\.so' \
    | xargs -I{} cp -L {} .device-ip/lib/
cat > .device-ip/bin/ip <<'WRAP'
#!/bin/sh
# iproute2's ip from the CI machine, with its libraries beside it (not on the library path of anything else).
d=$(cd "$(dirname "$0")/../lib" && pwd)
exec env LD_LIBRARY_PATH="$d" "$d/ip.real" "$@"
WRAP
chmod +x .device-ip/bin/ip
.device-ip/bin/ip -V
du -sh .device-ip
