// heat_cxx: an explicit 3-D heat-equation solver on MPI ranks, visualized in situ through the
// insitu C API (insitu_adaptor.h).
//
//   mpiexec -n 4 ./heat_cxx heat.yaml [--n 32] [--steps 40] [--every 10]
//
// The unit cube holds n^3 nodes (spacing h = 1/(n-1)); T starts as two Gaussian blobs and
// diffuses (dT/dt = laplacian T, dt = h^2/8) with the boundary nodes held at their initial
// values. The nodes are split over a 3-D grid of blocks (MPI_Dims_create); each rank stores
// its block with one ghost layer on every side, T[i][j][k] with k fastest, and refreshes the
// ghosts from its neighbours after every step. Every `every` steps it hands the adaptor its
// owned nodes plus the ghost plane it shares with its upper neighbours (so the blocks' meshes
// meet without a gap), described in place by strides into the ghosted array -- nothing is
// copied -- and an element field `rank` (int32). Rank 0 prints one line per in-situ step and,
// at the end, the global sum of T.
#include "insitu_adaptor.h"  // first: it keeps mpi.h to the C API (no MPI C++ bindings)

#include <mpi.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

struct Block {
    int n;             // global nodes per axis
    int lo[3], hi[3];  // owned global nodes [lo, hi)
    int L[3];          // local extents with ghosts: hi - lo + 2
    int lower[3], upper[3];  // neighbour ranks (MPI_PROC_NULL at the boundary)
    std::size_t idx(int i, int j, int k) const { return (std::size_t(i) * L[1] + j) * L[2] + k; }
};

double initial(double x, double y, double z) {
    auto blob = [](double dx, double dy, double dz, double s) {
        return std::exp(-(dx * dx + dy * dy + dz * dz) / (2 * s * s));
    };
    return blob(x - 0.35, y - 0.5, z - 0.5, 0.12) + blob(x - 0.65, y - 0.5, z - 0.55, 0.12);
}

// Refresh the ghost layers from the neighbours, one axis after the other; each axis's planes
// include the ghosts of the axes before it, so edges and corners arrive too (the stencil
// needs only faces, but the adaptor gets the upper ghost planes of all axes, edges included).
void exchange(std::vector<double>& T, const Block& b, MPI_Comm cart) {
    for (int a = 0; a < 3; ++a) {
        int sizes[3] = {b.L[0], b.L[1], b.L[2]};
        int sub[3], first[3];
        for (int c = 0; c < 3; ++c) {
            sub[c] = c < a ? b.L[c] : b.L[c] - 2;
            first[c] = c < a ? 0 : 1;
        }
        sub[a] = 1;
        int at[4] = {1, b.L[a] - 2, 0, b.L[a] - 1};  // send low, send high, recv low, recv high
        MPI_Datatype t[4];
        for (int q = 0; q < 4; ++q) {
            int start[3] = {first[0], first[1], first[2]};
            start[a] = at[q];
            MPI_Type_create_subarray(3, sizes, sub, start, MPI_ORDER_C, MPI_DOUBLE, &t[q]);
            MPI_Type_commit(&t[q]);
        }
        MPI_Sendrecv(T.data(), 1, t[0], b.lower[a], 10 + a, T.data(), 1, t[3], b.upper[a], 10 + a, cart,
                     MPI_STATUS_IGNORE);
        MPI_Sendrecv(T.data(), 1, t[1], b.upper[a], 20 + a, T.data(), 1, t[2], b.lower[a], 20 + a, cart,
                     MPI_STATUS_IGNORE);
        for (auto& x : t) MPI_Type_free(&x);
    }
}

}  // namespace

int main(int argc, char** argv) {
    MPI_Init(&argc, &argv);
    int size, rank;
    MPI_Comm_size(MPI_COMM_WORLD, &size);

    const char* config = nullptr;
    int n = 32, steps = 40, every = 10;
    for (int a = 1; a < argc; ++a) {
        std::string s = argv[a];
        if (s == "--n" && a + 1 < argc) n = std::atoi(argv[++a]);
        else if (s == "--steps" && a + 1 < argc) steps = std::atoi(argv[++a]);
        else if (s == "--every" && a + 1 < argc) every = std::atoi(argv[++a]);
        else config = argv[a];
    }
    if (!config || n < 4 || steps < 0 || every < 1) {
        std::fprintf(stderr, "usage: %s CONFIG.yaml [--n N>=4] [--steps S] [--every E>=1]\n", argv[0]);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }

    int dims[3] = {0, 0, 0}, periods[3] = {0, 0, 0}, coords[3];
    MPI_Dims_create(size, 3, dims);
    MPI_Comm cart;
    MPI_Cart_create(MPI_COMM_WORLD, 3, dims, periods, 0, &cart);
    MPI_Comm_rank(cart, &rank);
    MPI_Cart_coords(cart, rank, 3, coords);
    Block b;
    b.n = n;
    for (int a = 0; a < 3; ++a) {
        b.lo[a] = int(long(coords[a]) * n / dims[a]);
        b.hi[a] = int(long(coords[a] + 1) * n / dims[a]);
        b.L[a] = b.hi[a] - b.lo[a] + 2;
        MPI_Cart_shift(cart, a, 1, &b.lower[a], &b.upper[a]);
        if (b.hi[a] - b.lo[a] < 2) {
            if (rank == 0) std::fprintf(stderr, "heat_cxx: n=%d is too small for a split of %d\n", n, dims[a]);
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
    }

    const double h = 1.0 / (n - 1), dt = h * h / 8, r = dt / (h * h);
    std::vector<double> T(std::size_t(b.L[0]) * b.L[1] * b.L[2], 0.0), Tn;
    for (int i = 1; i < b.L[0] - 1; ++i)
        for (int j = 1; j < b.L[1] - 1; ++j)
            for (int k = 1; k < b.L[2] - 1; ++k)
                T[b.idx(i, j, k)] = initial((b.lo[0] + i - 1) * h, (b.lo[1] + j - 1) * h, (b.lo[2] + k - 1) * h);
    exchange(T, b, cart);
    Tn = T;

    // What the adaptor sees: owned nodes + the plane shared with each upper neighbour.
    int32_t has_up[3], nd[3];
    for (int a = 0; a < 3; ++a) {
        has_up[a] = b.upper[a] != MPI_PROC_NULL;
        nd[a] = b.hi[a] - b.lo[a] + has_up[a];
    }
    std::vector<int32_t> rank_cells(std::size_t(nd[0] - 1) * (nd[1] - 1) * (nd[2] - 1), rank);
    insitu_field fields[2];
    std::memset(fields, 0, sizeof fields);
    std::snprintf(fields[0].name, INSITU_NAME_MAX, "T");
    fields[0].association = INSITU_VERTEX;
    fields[0].dtype = INSITU_FLOAT64;
    fields[0].memory = INSITU_MEMORY_HOST;
    fields[0].layout = INSITU_LAYOUT_STRIDED;
    fields[0].strides[0] = int64_t(b.L[1]) * b.L[2] * sizeof(double);
    fields[0].strides[1] = int64_t(b.L[2]) * sizeof(double);
    fields[0].strides[2] = sizeof(double);
    std::snprintf(fields[1].name, INSITU_NAME_MAX, "rank");
    fields[1].association = INSITU_ELEMENT;
    fields[1].dtype = INSITU_INT32;
    fields[1].memory = INSITU_MEMORY_HOST;
    fields[1].layout = INSITU_LAYOUT_C;
    fields[1].data = rank_cells.data();
    insitu_domain domain;
    std::memset(&domain, 0, sizeof domain);
    domain.domain_id = rank;
    for (int a = 0; a < 3; ++a) {
        domain.dims[a] = nd[a];
        domain.origin[a] = b.lo[a] * h;
        domain.spacing[a] = h;
    }
    domain.nfields = 2;
    domain.fields = fields;
    insitu_mesh mesh = {1, 0, &domain};

    int status = insitu_initialize(config, MPI_Comm_c2f(cart));
    if (rank == 0) {
        std::printf("heat_cxx: ranks=%d split=%dx%dx%d n=%d steps=%d every=%d insitu_initialize=%s\n", size,
                    dims[0], dims[1], dims[2], n, steps, every, insitu_status_name(status));
        std::fflush(stdout);
    }
    const bool insitu = status == INSITU_OK;  // without it the simulation still runs

    int step = 0;
    for (; step <= steps; ++step) {
        if (step > 0) {
            for (int i = 1; i < b.L[0] - 1; ++i) {
                int gi = b.lo[0] + i - 1;
                for (int j = 1; j < b.L[1] - 1; ++j) {
                    int gj = b.lo[1] + j - 1;
                    for (int k = 1; k < b.L[2] - 1; ++k) {
                        int gk = b.lo[2] + k - 1;
                        std::size_t c = b.idx(i, j, k);
                        if (gi == 0 || gj == 0 || gk == 0 || gi == n - 1 || gj == n - 1 || gk == n - 1) continue;
                        Tn[c] = T[c] + r * (T[b.idx(i - 1, j, k)] + T[b.idx(i + 1, j, k)] + T[b.idx(i, j - 1, k)] +
                                            T[b.idx(i, j + 1, k)] + T[b.idx(i, j, k - 1)] + T[b.idx(i, j, k + 1)] -
                                            6 * T[c]);
                    }
                }
            }
            T.swap(Tn);
            exchange(T, b, cart);
        }
        if (!insitu || step % every != 0) continue;
        fields[0].data = &T[b.idx(1, 1, 1)];  // T and Tn swap: point at the current one
        status = insitu_execute(step, step * dt, &mesh);
        insitu_results_t res;
        int rstatus = insitu_results(&res);
        double iso = NAN;
        insitu_get_iso_value("p1", 0, &iso);
        if (rank == 0) {
            std::printf("step %d t=%.6f insitu_execute=%s stop=%d errors=%d iso[p1]=%g\n", step, step * dt,
                        insitu_status_name(status), rstatus == INSITU_OK ? res.stop : -1,
                        rstatus == INSITU_OK ? res.nerrors : -1, iso);
            std::fflush(stdout);
        }
        if (rstatus == INSITU_OK && res.stop) {
            if (rank == 0) std::printf("stopped by the adaptor at step %d\n", step);
            break;
        }
    }
    if (insitu) insitu_finalize();

    double local = 0, total = 0;
    for (int i = 1; i < b.L[0] - 1; ++i)
        for (int j = 1; j < b.L[1] - 1; ++j)
            for (int k = 1; k < b.L[2] - 1; ++k) local += T[b.idx(i, j, k)];
    MPI_Reduce(&local, &total, 1, MPI_DOUBLE, MPI_SUM, 0, cart);
    if (rank == 0) std::printf("done steps=%d sum(T)=%.17g\n", step > steps ? steps : step, total);
    MPI_Comm_free(&cart);
    MPI_Finalize();
    return 0;
}
