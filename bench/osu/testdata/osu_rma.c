/*
 * The comparator for Rivet's one-sided numbers: the loops of OSU 7.4's
 * one-sided benchmarks — same options, defaults, counts and output as
 * Rivet's bench/osu (and OSU's own) — written against MPI and built with
 * Debian's Open MPI (mpicc.openmpi). lab/rma-vs-ompi.sh runs it beside
 * Rivet, on shared memory and on soft-RoCE.
 *
 *   osu_rma NAME [-m [MIN:]MAX] [-i ITER] [-x WARMUP] [-W WINDOW]
 *       [-w create|allocate|dynamic] [-s lock|flush|flush_local|lock_all|pscw|fence]
 *       [-T mpi_char|mpi_int|mpi_float|all|mpi_long] [--decimals N]
 *
 * NAME is osu_put_latency, osu_get_latency, osu_put_bw, osu_get_bw,
 * osu_put_bibw, osu_acc_latency, osu_get_acc_latency, osu_fop_latency or
 * osu_cas_latency. -T mpi_long is Rivet's extension (an 8-byte integer),
 * --decimals its option for more than OSU's two decimals.
 * Buffers are allocated once at the largest size; windows are made per
 * size (per type for fetch-and-op and compare-and-swap), as OSU's are.
 */
#include <getopt.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

enum { LAT, BW, BIBW };
enum { PUT, GET, ACC, GETACC, FOP, CAS };
enum { WCREATE, WALLOCATE, WDYNAMIC };
enum { LOCK, PSCW, FENCE, FLUSH, FLUSH_LOCAL, LOCK_ALL };

static const char *win_names[] = {"MPI_Win_create", "MPI_Win_allocate", "MPI_Win_create_dynamic"};
static const char *sync_names[] = {"MPI_Win_lock/unlock", "MPI_Win_post/start/complete/wait", "MPI_Win_fence",
                                   "MPI_Win_flush", "MPI_Win_flush_local", "MPI_Win_lock_all/unlock_all"};

struct bench {
    const char *name, *title;
    int kind, call, win, sync, excl, lock_excl;
};

static const struct bench benches[] = {
    {"osu_put_latency", "OSU MPI_Put Latency Test", LAT, PUT, WALLOCATE, FLUSH, 0, 0},
    {"osu_get_latency", "OSU MPI_Get latency Test", LAT, GET, WALLOCATE, FLUSH, 0, 0},
    {"osu_put_bw", "OSU MPI_Put Bandwidth Test", BW, PUT, WALLOCATE, FLUSH, 0, 0},
    {"osu_get_bw", "OSU MPI_Get Bandwidth Test", BW, GET, WALLOCATE, FLUSH, 0, 0},
    {"osu_put_bibw", "OSU MPI_Put Bi-directional Bandwidth Test", BIBW, PUT, WALLOCATE, PSCW, 0, 0},
    {"osu_acc_latency", "OSU MPI_Accumulate latency Test", LAT, ACC, WALLOCATE, FLUSH, 0, 0},
    {"osu_get_acc_latency", "OSU MPI_Get_accumulate latency Test", LAT, GETACC, WCREATE, LOCK, 1, 0},
    {"osu_fop_latency", "OSU MPI_Fetch_and_op latency Test", LAT, FOP, WALLOCATE, FLUSH, 0, 1},
    {"osu_cas_latency", "OSU MPI_Compare_and_swap latency Test", LAT, CAS, WALLOCATE, FLUSH, 0, 1},
};

static const struct bench *b;
static int rank, peer, win_kind, sync_kind, window = 64;
static long min_size = 1, max_size = 1 << 22;
static int iters, warm, iters_large, warm_large, decimals = 2;
static char *sbuf, *rbuf, *tbuf, *cbuf, *base;
static MPI_Group peer_group;

static int usage(void)
{
    if (rank == 0)
        fprintf(stderr, "usage: osu_rma NAME [-m [MIN:]MAX] [-i ITER] [-x WARMUP] [-W WINDOW] [-w FLAVOR] [-s SYNC] [-T TYPE]\n");
    MPI_Finalize();
    return 1;
}

static char *alloc_fill(size_t n, int c)
{
    char *p = NULL;
    if (posix_memalign((void **)&p, (size_t)getpagesize(), n))
        MPI_Abort(MPI_COMM_WORLD, 1);
    memset(p, c, n);
    return p;
}

/* make_window makes the window of n bytes by -w's flavour; *disp is its
 * memory's displacement at the peer. */
static MPI_Win make_window(size_t n, MPI_Aint *disp)
{
    MPI_Win w;
    void *mem;
    *disp = 0;
    switch (win_kind) {
    case WCREATE:
        MPI_Win_create(base, n, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &w);
        break;
    case WDYNAMIC: {
        MPI_Aint mine;
        MPI_Win_create_dynamic(MPI_INFO_NULL, MPI_COMM_WORLD, &w);
        MPI_Win_attach(w, base, n);
        MPI_Get_address(base, &mine);
        MPI_Sendrecv(&mine, 1, MPI_AINT, peer, 1, disp, 1, MPI_AINT, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        break;
    }
    default:
        MPI_Win_allocate(n, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &mem, &w);
    }
    return w;
}

static void free_window(MPI_Win *w)
{
    if (win_kind == WDYNAMIC)
        MPI_Win_detach(*w, base);
    MPI_Win_free(w);
}

/* op issues the timed operation(s) to target t. */
static void op(MPI_Win w, int t, long size, int count, MPI_Datatype dt, MPI_Aint disp)
{
    int reps = b->kind == LAT ? 1 : window;
    switch (b->call) {
    case PUT:
        for (int j = 0; j < reps; j++)
            MPI_Put(sbuf + j * size, size, MPI_CHAR, t, disp + j * size, size, MPI_CHAR, w);
        break;
    case GET:
        for (int j = 0; j < reps; j++)
            MPI_Get(rbuf + j * size, size, MPI_CHAR, t, disp + j * size, size, MPI_CHAR, w);
        break;
    case ACC:
        MPI_Accumulate(sbuf, count, dt, t, disp, count, dt, MPI_SUM, w);
        break;
    case GETACC:
        MPI_Get_accumulate(sbuf, size, MPI_CHAR, tbuf, size, MPI_CHAR, t, disp, size, MPI_CHAR, MPI_SUM, w);
        break;
    case FOP:
        MPI_Fetch_and_op(sbuf, tbuf, dt, t, disp, MPI_SUM, w);
        break;
    case CAS:
        MPI_Compare_and_swap(sbuf, cbuf, tbuf, dt, t, disp, w);
        break;
    }
}

/* timed runs n+skip rounds under -s's synchronization and returns rank
 * 0's time for the n. */
static double timed(MPI_Win w, int n, int skip, long size, int count, MPI_Datatype dt, MPI_Aint disp)
{
    double t0 = 0;
    int lt = (b->excl || (b->lock_excl && sync_kind == LOCK)) ? MPI_LOCK_EXCLUSIVE : MPI_LOCK_SHARED;
    int bw = b->kind == BW;
    switch (sync_kind) {
    case FLUSH:
    case FLUSH_LOCAL:
        if (rank != 0)
            return 0;
        MPI_Win_lock(lt, 1, 0, w);
        for (int i = 0; i < n + skip; i++) {
            if (i == skip)
                t0 = MPI_Wtime();
            op(w, 1, size, count, dt, disp);
            if (sync_kind == FLUSH)
                MPI_Win_flush(1, w);
            else
                MPI_Win_flush_local(1, w);
        }
        t0 = MPI_Wtime() - t0;
        MPI_Win_unlock(1, w);
        return t0;
    case LOCK:
    case LOCK_ALL:
        if (rank != 0)
            return 0;
        for (int i = 0; i < n + skip; i++) {
            if (i == skip)
                t0 = MPI_Wtime();
            if (sync_kind == LOCK)
                MPI_Win_lock(lt, 1, 0, w);
            else
                MPI_Win_lock_all(0, w);
            op(w, 1, size, count, dt, disp);
            if (sync_kind == LOCK)
                MPI_Win_unlock(1, w);
            else
                MPI_Win_unlock_all(w);
        }
        return MPI_Wtime() - t0;
    case FENCE:
        for (int i = 0; i < n + skip; i++) {
            if (i == skip)
                t0 = MPI_Wtime();
            MPI_Win_fence(0, w);
            if (b->kind == BIBW || (rank == 0 && bw)) {
                op(w, peer, size, count, dt, disp);
                MPI_Win_fence(0, w);
            } else if (bw) {
                MPI_Win_fence(0, w);
            } else if (rank == 0) {
                op(w, peer, size, count, dt, disp);
                MPI_Win_fence(0, w);
                MPI_Win_fence(0, w);
            } else {
                MPI_Win_fence(0, w);
                op(w, peer, size, count, dt, disp);
                MPI_Win_fence(0, w);
            }
        }
        return MPI_Wtime() - t0;
    default: /* PSCW */
        for (int i = 0; i < n + skip; i++) {
            if (b->kind == BIBW) {
                if (i == skip)
                    t0 = MPI_Wtime();
                MPI_Win_post(peer_group, 0, w);
                MPI_Win_start(peer_group, 0, w);
                op(w, peer, size, count, dt, disp);
                MPI_Win_complete(w);
                MPI_Win_wait(w);
            } else if (rank == 0) {
                MPI_Win_start(peer_group, 0, w);
                if (i == skip)
                    t0 = MPI_Wtime();
                op(w, peer, size, count, dt, disp);
                MPI_Win_complete(w);
                if (!bw) {
                    MPI_Win_post(peer_group, 0, w);
                    MPI_Win_wait(w);
                }
            } else {
                MPI_Win_post(peer_group, 0, w);
                MPI_Win_wait(w);
                if (!bw) {
                    MPI_Win_start(peer_group, 0, w);
                    op(w, peer, size, count, dt, disp);
                    MPI_Win_complete(w);
                }
            }
        }
        return MPI_Wtime() - t0;
    }
}

static double per_op(double t, int n)
{
    double us = t * 1e6 / n;
    return (sync_kind == FENCE || sync_kind == PSCW) ? us / 2 : us;
}

static void run_type(MPI_Datatype dt, int dsize, const char *dname)
{
    if (rank == 0) {
        printf("# %s v7.4\n# Window creation: %s\n# Synchronization: %s\n", b->title, win_names[win_kind],
               sync_names[sync_kind]);
        if (b->call != GETACC)
            printf("# Datatype: %s.\n", dname);
        printf("%-10s%20s\n", "# Size", b->kind == LAT ? "Latency (us)" : "Bandwidth (MB/s)");
        fflush(stdout);
    }
    MPI_Aint disp;
    if (b->call == FOP || b->call == CAS) {
        MPI_Win w = make_window(max_size, &disp);
        MPI_Barrier(MPI_COMM_WORLD);
        double t = timed(w, iters, warm, 0, 1, dt, disp);
        MPI_Barrier(MPI_COMM_WORLD);
        if (rank == 0)
            printf("%-10d%20.*f\n", dsize, decimals, per_op(t, iters));
        fflush(stdout);
        free_window(&w);
        return;
    }
    for (long size = min_size; size <= max_size; size *= 2) {
        int count = size / dsize;
        if (count == 0)
            continue;
        int n = size > 8192 ? iters_large : iters, skip = size > 8192 ? warm_large : warm;
        long bytes = b->kind == LAT ? size : size * window;
        MPI_Win w = make_window(bytes, &disp);
        if (b->kind != LAT || sync_kind == FENCE || sync_kind == PSCW)
            MPI_Barrier(MPI_COMM_WORLD);
        double t = timed(w, n, skip, size, count, dt, disp);
        MPI_Barrier(MPI_COMM_WORLD);
        if (rank == 0) {
            double v = per_op(t, n);
            if (b->kind != LAT)
                v = size / 1e6 * n * window / t * (b->kind == BIBW ? 2 : 1);
            printf("%-10ld%20.*f\n", size, decimals, v);
            fflush(stdout);
        }
        free_window(&w);
    }
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    int nprocs;
    MPI_Comm_size(MPI_COMM_WORLD, &nprocs);
    if (argc < 2)
        return usage();
    for (size_t i = 0; i < sizeof benches / sizeof benches[0]; i++)
        if (strcmp(argv[1], benches[i].name) == 0)
            b = &benches[i];
    if (!b)
        return usage();
    win_kind = b->win;
    sync_kind = b->sync;
    if (b->kind == LAT) {
        iters = 10000, warm = 100, iters_large = 1000, warm_large = 10;
    } else {
        iters = 100, warm = 10, iters_large = 20, warm_large = 2;
    }
    MPI_Datatype types[8];
    int sizes[8], ntypes = 0;
    const char *names[8];
#define ADD(t, s, nm) (types[ntypes] = (t), sizes[ntypes] = (s), names[ntypes++] = (nm))
    int c;
    optind = 2;
    static const struct option longopts[] = {{"decimals", required_argument, NULL, 'D'}, {0}};
    while ((c = getopt_long(argc, argv, "m:i:x:W:w:s:T:", longopts, NULL)) != -1) {
        switch (c) {
        case 'D':
            decimals = atoi(optarg);
            break;
        case 'm': {
            char *colon = strchr(optarg, ':');
            if (!colon)
                max_size = atol(optarg);
            else {
                if (colon != optarg)
                    min_size = atol(optarg);
                if (colon[1])
                    max_size = atol(colon + 1);
            }
            if (min_size < 1 || max_size < min_size)
                return usage();
            break;
        }
        case 'i':
            iters = iters_large = atoi(optarg);
            break;
        case 'x':
            warm = warm_large = atoi(optarg);
            break;
        case 'W':
            window = atoi(optarg);
            break;
        case 'w':
            if (!strcasecmp(optarg, "create"))
                win_kind = WCREATE;
            else if (!strcasecmp(optarg, "allocate"))
                win_kind = WALLOCATE;
            else if (!strcasecmp(optarg, "dynamic"))
                win_kind = WDYNAMIC;
            else
                return usage();
            break;
        case 's': {
            const char *s[] = {"lock", "pscw", "fence", "flush", "flush_local", "lock_all"};
            int k = -1;
            for (int j = 0; j < 6; j++)
                if (!strcasecmp(optarg, s[j]))
                    k = j;
            if (k < 0 || (b->kind == BIBW && k != PSCW && k != FENCE))
                return usage();
            sync_kind = k;
            break;
        }
        case 'T':
            if (!strncasecmp(optarg, "MPI_CHAR", 8))
                ADD(MPI_CHAR, 1, "MPI_CHAR");
            else if (!strncasecmp(optarg, "MPI_INT", 7))
                ADD(MPI_INT, 4, "MPI_INT");
            else if (!strncasecmp(optarg, "MPI_FLOAT", 9))
                ADD(MPI_FLOAT, 4, "MPI_FLOAT");
            else if (!strncasecmp(optarg, "MPI_LONG", 8))
                ADD(MPI_LONG, 8, "MPI_LONG");
            else if (!strncasecmp(optarg, "ALL", 3)) {
                ADD(MPI_CHAR, 1, "MPI_CHAR");
                ADD(MPI_INT, 4, "MPI_INT");
                ADD(MPI_FLOAT, 4, "MPI_FLOAT");
            } else
                return usage();
            break;
        default:
            return usage();
        }
    }
    if (nprocs != 2) {
        if (rank == 0)
            fprintf(stderr, "This test requires exactly two processes\n");
        MPI_Finalize();
        return 1;
    }
    if (ntypes == 0 || !(b->call == ACC || b->call == FOP || b->call == CAS))
        ntypes = 0, ADD(MPI_CHAR, 1, "MPI_CHAR");
    peer = 1 - rank;
    MPI_Group world;
    MPI_Comm_group(MPI_COMM_WORLD, &world);
    MPI_Group_incl(world, 1, &peer, &peer_group);
    size_t n = b->kind == LAT ? (max_size > 8 ? max_size : 8) : (size_t)max_size * window;
    if (b->call == FOP || b->call == CAS) {
        sbuf = alloc_fill(n, 'a'), base = alloc_fill(n, 'b'), tbuf = alloc_fill(n, 'c'), cbuf = alloc_fill(n, 'a');
    } else if (b->call == GETACC) {
        sbuf = alloc_fill(n, 0), base = alloc_fill(n, 0), tbuf = alloc_fill(n, 0);
    } else {
        sbuf = alloc_fill(n, 'a'), base = alloc_fill(n, 'a'), rbuf = alloc_fill(n, 'a');
    }
    for (int k = 0; k < ntypes; k++)
        run_type(types[k], sizes[k], names[k]);
    MPI_Group_free(&peer_group);
    MPI_Group_free(&world);
    free(sbuf), free(base), free(rbuf), free(tbuf), free(cbuf);
    MPI_Finalize();
    return 0;
}
