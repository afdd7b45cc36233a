/*
 * The comparator for Rivet's shared-memory point-to-point numbers: the
 * osu_latency and osu_bw measurements (same loops, counts and output
 * format as Rivet's bench/osu), written against MPI and built with
 * Debian's Open MPI (mpicc.openmpi). bench/shm-vs-ompi.sh runs both.
 *
 *   osu_pt2pt latency|bw [-m [MIN:]MAX] [-i ITER] [-x WARMUP] [-W WINDOW]
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void run_latency(int rank, char *s, char *r, int min, int max, int iters, int warm, int iters_large, int warm_large)
{
    if (rank == 0)
        printf("\n# OSU MPI Latency Test v7.4\n# Datatype: MPI_CHAR.\n%-10s%18s\n", "# Size", "Avg Latency(us)");
    for (int size = 0; size <= max; size = size ? size * 2 : 1) {
        if (size < min)
            continue;
        int n = size > 8192 ? iters_large : iters, w = size > 8192 ? warm_large : warm;
        double t0 = 0;
        MPI_Barrier(MPI_COMM_WORLD);
        for (int i = 0; i < n + w; i++) {
            if (i == w)
                t0 = MPI_Wtime();
            if (rank == 0) {
                MPI_Send(s, size, MPI_CHAR, 1, 1, MPI_COMM_WORLD);
                MPI_Recv(r, size, MPI_CHAR, 1, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            } else if (rank == 1) {
                MPI_Recv(r, size, MPI_CHAR, 0, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                MPI_Send(s, size, MPI_CHAR, 0, 1, MPI_COMM_WORLD);
            }
        }
        if (rank == 0)
            printf("%-10d%18.2f\n", size, (MPI_Wtime() - t0) * 1e6 / (2.0 * n));
        fflush(stdout);
    }
}

static void run_bw(int rank, char *s, char *r, int min, int max, int iters, int warm, int iters_large, int warm_large, int window)
{
    MPI_Request *reqs = malloc(sizeof(MPI_Request) * window);
    char ack[4];
    if (rank == 0)
        printf("\n# OSU MPI Bandwidth Test v7.4\n# Datatype: MPI_CHAR.\n%-10s%18s\n", "# Size", "Bandwidth (MB/s)");
    for (int size = 1; size <= max; size *= 2) {
        if (size < min)
            continue;
        int n = size > 8192 ? iters_large : iters, w = size > 8192 ? warm_large : warm;
        double t0 = 0;
        MPI_Barrier(MPI_COMM_WORLD);
        for (int i = 0; i < n + w; i++) {
            if (i == w)
                t0 = MPI_Wtime();
            if (rank == 0) {
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
            printf("%-10d%18.2f\n", size, size / 1e6 * n * window / t);
        fflush(stdout);
    }
    free(reqs);
}

int main(int argc, char **argv)
{
    int rank, nprocs, min = 0, max = 1 << 22, iters = -1, warm = -1, window = 64, opt;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nprocs);
    if (argc < 2 || nprocs < 2) {
        if (rank == 0)
            fprintf(stderr, "usage: mpirun -n 2 %s latency|bw [-m MAX] [-i ITER] [-x WARMUP] [-W WINDOW]\n", argv[0]);
        MPI_Finalize();
        return 2;
    }
    const char *test = argv[1];
    optind = 2;
    while ((opt = getopt(argc, argv, "m:i:x:W:")) != -1) {
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
        default: MPI_Abort(MPI_COMM_WORLD, 2);
        }
    }
    char *s = malloc(max + 1), *r = malloc(max + 1);
    memset(s, 'a', max + 1);
    memset(r, 'b', max + 1);
    if (strcmp(test, "latency") == 0) {
        run_latency(rank, s, r, min, max, iters > 0 ? iters : 10000, warm >= 0 ? warm : 100,
                    iters > 0 ? iters : 1000, warm >= 0 ? warm : 10);
    } else {
        run_bw(rank, s, r, min, max, iters > 0 ? iters : 100, warm >= 0 ? warm : 10,
               iters > 0 ? iters : 20, warm >= 0 ? warm : 2, window);
    }
    free(s);
    free(r);
    MPI_Finalize();
    return 0;
}
