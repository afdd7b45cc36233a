/*
 * The comparator for Rivet's point-to-point and collective numbers: the
 * loops of osu_latency, osu_bw, osu_bibw, osu_allreduce and osu_barrier —
 * same counts and output format as Rivet's bench/osu — written against
 * MPI and built with Debian's Open MPI (mpicc.openmpi). lab/shm-vs-ompi.sh,
 * lab/coll-vs-ompi.sh, lab/fabric-on-rxe.sh and lab/cross-node.sh run it
 * beside Rivet.
 *
 *   osu latency|bw|bibw|allreduce|barrier [-m [MIN:]MAX] [-i ITER] [-x WARMUP]
 *       [-W WINDOW] [--percentiles] [--decimals N]
 *   osu init
 *
 * init is osu_init: how long MPI_Init took in each process, its minimum,
 * maximum and mean, in whole milliseconds (OSU's arithmetic and line).
 *
 * --percentiles (latency) adds the columns of Rivet's --percentiles: the
 * median, 90th and 99th percentiles and maximum of each iteration's
 * one-way time, half its round trip, with the clock read every iteration.
 *
 * The collectives, like Rivet's, read the clock once on each side of the
 * timed loop.
 */
#include <getopt.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int decimals = 2; /* --decimals: Rivet's option, for slow links' small sizes */

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void run_latency(int rank, char *s, char *r, int min, int max, int iters, int warm, int iters_large, int warm_large,
                        int pct)
{
    int most = iters > iters_large ? iters : iters_large;
    double *each = pct ? malloc(sizeof(double) * (most > 0 ? most : 1)) : NULL;
    if (rank == 0) {
        printf("\n# OSU MPI Latency Test v7.4\n# Datatype: MPI_CHAR.\n%-10s%18s", "# Size", "Avg Latency(us)");
        if (pct)
            printf("%18s%18s%18s%18s", "P50 Latency(us)", "P90 Latency(us)", "P99 Latency(us)", "Max Latency(us)");
        printf("\n");
    }
    for (int size = 0; size <= max; size = size ? size * 2 : 1) {
        if (size < min)
            continue;
        int n = size > 8192 ? iters_large : iters, w = size > 8192 ? warm_large : warm;
        double t0 = 0, last = 0;
        MPI_Barrier(MPI_COMM_WORLD);
        for (int i = 0; i < n + w; i++) {
            if (i == w) {
                t0 = MPI_Wtime();
                last = t0;
            } else if (i > w && each) {
                double now = MPI_Wtime();
                each[i - w - 1] = (now - last) * 1e6 / 2;
                last = now;
            }
            if (rank == 0) {
                MPI_Send(s, size, MPI_CHAR, 1, 1, MPI_COMM_WORLD);
                MPI_Recv(r, size, MPI_CHAR, 1, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            } else if (rank == 1) {
                MPI_Recv(r, size, MPI_CHAR, 0, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                MPI_Send(s, size, MPI_CHAR, 0, 1, MPI_COMM_WORLD);
            }
        }
        double end = MPI_Wtime();
        if (rank == 0) {
            printf("%-10d%18.*f", size, decimals, (end - t0) * 1e6 / (2.0 * n));
            if (each && n > 0) {
                each[n - 1] = (end - last) * 1e6 / 2;
                qsort(each, n, sizeof(double), cmp_double);
                const int p[] = {50, 90, 99};
                for (int k = 0; k < 3; k++) /* nearest rank: the ceil(p·n/100)-th smallest */
                    printf("%18.*f", decimals, each[(p[k] * (long)n + 99) / 100 - 1]);
                printf("%18.*f", decimals, each[n - 1]);
            }
            printf("\n");
        }
        fflush(stdout);
    }
    free(each);
}

static void run_bw(int rank, char *s, char *r, int min, int max, int iters, int warm, int iters_large, int warm_large, int window,
                   int bi)
{
    MPI_Request *reqs = malloc(sizeof(MPI_Request) * 2 * window);
    char ack[4];
    if (rank == 0)
        printf("\n# OSU MPI %s Test v7.4\n# Datatype: MPI_CHAR.\n%-10s%18s\n", bi ? "Bi-Directional Bandwidth" : "Bandwidth",
               "# Size", "Bandwidth (MB/s)");
    for (int size = 1; size <= max; size *= 2) {
        if (size < min)
            continue;
        int n = size > 8192 ? iters_large : iters, w = size > 8192 ? warm_large : warm;
        double t0 = 0;
        MPI_Barrier(MPI_COMM_WORLD);
        for (int i = 0; i < n + w; i++) {
            if (i == w)
                t0 = MPI_Wtime();
            if (bi) { /* osu_bibw: both send a window at once, no acknowledgement */
                if (rank < 2) {
                    for (int j = 0; j < window; j++)
                        MPI_Irecv(r, size, MPI_CHAR, 1 - rank, 10, MPI_COMM_WORLD, &reqs[j]);
                    for (int j = 0; j < window; j++)
                        MPI_Isend(s, size, MPI_CHAR, 1 - rank, 10, MPI_COMM_WORLD, &reqs[window + j]);
                    MPI_Waitall(2 * window, reqs, MPI_STATUSES_IGNORE);
                }
            } else if (rank == 0) {
                for (int j = 0; j < window; j++)
                    MPI_Isend(s, size, MPI_CHAR, 1, 100, MPI_COMM_WORLD, &reqs[j]);
                MPI_Waitall(window, reqs, MPI_STATUSES_IGNORE);
                MPI_Recv(ack, 4, MPI_CHAR, 1, 101, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            } else if (rank == 1) {
                for (int j = 0; j < window; j++)
                    MPI_Irecv(r, size, MPI_CHAR, 0, 100, MPI_COMM_WORLD, &reqs[j]);
                MPI_Waitall(window, reqs, MPI_STATUSES_IGNORE);
                MPI_Send(ack, 4, MPI_CHAR, 0, 101, MPI_COMM_WORLD);
            }
        }
        double t = MPI_Wtime() - t0;
        if (rank == 0)
            printf("%-10d%18.*f\n", size, decimals, size / 1e6 * n * window * (bi ? 2 : 1) / t);
        fflush(stdout);
    }
    free(reqs);
}

static void row(int rank, int nprocs, int sized, int size, double lat)
{
    double sum = 0;
    MPI_Reduce(&lat, &sum, 1, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank != 0)
        return;
    if (sized)
        printf("%-10d%18.2f\n", size, sum / nprocs);
    else
        printf("%17.2f\n", sum / nprocs);
    fflush(stdout);
}

static void run_collective(int rank, int nprocs, int allreduce, char *s, char *r, int min, int max, int iters, int warm)
{
    if (allreduce) {
        if (rank == 0)
            printf("\n# OSU MPI Allreduce Latency Test v7.4\n# Datatype: MPI_CHAR.\n%-10s%18s\n", "# Size", "Avg Latency(us)");
        for (int size = min; size <= max; size *= 2) {
            int n = size > 8192 ? (iters > 0 ? iters : 100) : (iters > 0 ? iters : 1000);
            int w = size > 8192 ? (warm >= 0 ? warm : 10) : (warm >= 0 ? warm : 100);
            MPI_Barrier(MPI_COMM_WORLD);
            for (int i = 0; i < w; i++)
                MPI_Allreduce(s, r, size, MPI_CHAR, MPI_SUM, MPI_COMM_WORLD);
            double t0 = MPI_Wtime(); /* one reading each side of the loop, as Rivet's bench does */
            for (int i = 0; i < n; i++)
                MPI_Allreduce(s, r, size, MPI_CHAR, MPI_SUM, MPI_COMM_WORLD);
            row(rank, nprocs, 1, size, (MPI_Wtime() - t0) * 1e6 / n);
        }
    } else {
        if (rank == 0)
            printf("\n# OSU MPI Barrier Latency Test v7.4\n# Avg Latency(us)\n");
        int n = iters > 0 ? iters : 1000, w = warm >= 0 ? warm : 100;
        MPI_Barrier(MPI_COMM_WORLD);
        for (int i = 0; i < w; i++)
            MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        for (int i = 0; i < n; i++)
            MPI_Barrier(MPI_COMM_WORLD);
        row(rank, nprocs, 0, 0, (MPI_Wtime() - t0) * 1e6 / n);
    }
}

int main(int argc, char **argv)
{
    int rank, nprocs, opt, iters = -1, warm = -1, window = 64, pct = 0;
    static const struct option longopts[] = {{"percentiles", no_argument, NULL, 'P'}, {"decimals", required_argument, NULL, 'D'}, {0}};
    struct timespec before, after;
    clock_gettime(CLOCK_REALTIME, &before);
    MPI_Init(&argc, &argv);
    clock_gettime(CLOCK_REALTIME, &after);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nprocs);
    const char *test = argc > 1 ? argv[1] : "";
    if (!strcmp(test, "init")) {
        long took = (after.tv_sec - before.tv_sec) * 1e3, lo, hi, sum;
        took += (after.tv_nsec - before.tv_nsec) / 1e6;
        MPI_Reduce(&took, &lo, 1, MPI_LONG, MPI_MIN, 0, MPI_COMM_WORLD);
        MPI_Reduce(&took, &hi, 1, MPI_LONG, MPI_MAX, 0, MPI_COMM_WORLD);
        MPI_Reduce(&took, &sum, 1, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
        if (rank == 0)
            printf("# OSU MPI Init Test v7.4\nnprocs: %d, min: %ld ms, max: %ld ms, avg: %ld ms\n", nprocs, lo, hi, sum / nprocs);
        MPI_Finalize();
        return 0;
    }
    int pt2pt = !strcmp(test, "latency") || !strcmp(test, "bw") || !strcmp(test, "bibw");
    if (nprocs < 2 || !(pt2pt || !strcmp(test, "allreduce") || !strcmp(test, "barrier"))) {
        if (rank == 0)
            fprintf(stderr, "usage: mpirun -n N %s latency|bw|bibw|allreduce|barrier [-m [MIN:]MAX] [-i ITER] [-x WARMUP] [-W WINDOW] [--percentiles] | init\n", argv[0]);
        MPI_Finalize();
        return 2;
    }
    /* OSU's default sizes: point-to-point up to 4 MiB (latency from 0),
       collectives 1 byte to 1 MiB. */
    int min = strcmp(test, "latency") ? 1 : 0, max = pt2pt ? 1 << 22 : 1 << 20;
    optind = 2;
    while ((opt = getopt_long(argc, argv, "m:i:x:W:", longopts, NULL)) != -1) {
        switch (opt) {
        case 'm':
            if (strchr(optarg, ':')) {
                min = atoi(optarg);
                max = atoi(strchr(optarg, ':') + 1);
            } else {
                max = atoi(optarg);
            }
            break;
        case 'i': iters = atoi(optarg); break;
        case 'x': warm = atoi(optarg); break;
        case 'W': window = atoi(optarg); break;
        case 'P': pct = 1; break;
        case 'D': decimals = atoi(optarg); break;
        default: MPI_Abort(MPI_COMM_WORLD, 2);
        }
    }
    char *s = malloc(max + 1), *r = malloc(max + 1);
    memset(s, 'a', max + 1);
    memset(r, 'b', max + 1);
    if (!strcmp(test, "latency"))
        run_latency(rank, s, r, min, max, iters > 0 ? iters : 10000, warm >= 0 ? warm : 100,
                    iters > 0 ? iters : 1000, warm >= 0 ? warm : 10, pct);
    else if (!strcmp(test, "bw") || !strcmp(test, "bibw"))
        run_bw(rank, s, r, min, max, iters > 0 ? iters : 100, warm >= 0 ? warm : 10,
               iters > 0 ? iters : 20, warm >= 0 ? warm : 2, window, !strcmp(test, "bibw"));
    else
        run_collective(rank, nprocs, !strcmp(test, "allreduce"), s, r, min, max, iters, warm);
    free(s);
    free(r);
    MPI_Finalize();
    return 0;
}
