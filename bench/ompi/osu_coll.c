/*
 * The comparator for Rivet's collectives: the osu_allreduce and
 * osu_barrier loops (same counts, output and timing as Rivet's bench/osu:
 * one clock reading on each side of the timed loop),
 * written against MPI and built with Debian's Open MPI (mpicc.openmpi).
 * bench/coll-vs-ompi.sh runs both.
 *
 *   osu_coll allreduce|barrier [-m [MIN:]MAX] [-i ITER] [-x WARMUP]
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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

int main(int argc, char **argv)
{
    int rank, nprocs, min = 1, max = 1 << 20, iters = -1, warm = -1, opt;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nprocs);
    if (argc < 2) {
        if (rank == 0)
            fprintf(stderr, "usage: %s allreduce|barrier [-m [MIN:]MAX] [-i ITER] [-x WARMUP]\n", argv[0]);
        MPI_Finalize();
        return 2;
    }
    int allreduce = strcmp(argv[1], "allreduce") == 0;
    optind = 2;
    while ((opt = getopt(argc, argv, "m:i:x:")) != -1) {
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
        default: MPI_Abort(MPI_COMM_WORLD, 2);
        }
    }
    char *s = malloc(max), *r = malloc(max);
    memset(s, 1, max);
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
    free(s);
    free(r);
    MPI_Finalize();
    return 0;
}
