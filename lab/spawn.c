/* spawn.c: times MPI_Comm_spawn of k processes from every rank of
 * MPI_COMM_WORLD (root 0), rounds times, for lab/spawn-vs-mpi.sh: the
 * reference beside `rivet bench ft_respawn`'s spawn rows. A spawned
 * process waits for its spawner's word and leaves. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
	MPI_Init(&argc, &argv);
	MPI_Comm parent;
	MPI_Comm_get_parent(&parent);
	if (parent != MPI_COMM_NULL) {
		int x;
		MPI_Recv(&x, 1, MPI_INT, 0, 1, parent, MPI_STATUS_IGNORE);
		MPI_Comm_disconnect(&parent);
		MPI_Finalize();
		return 0;
	}
	int rounds = argc > 1 ? atoi(argv[1]) : 5, k = argc > 2 ? atoi(argv[2]) : 1, rank;
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	for (int r = 0; r < rounds; r++) {
		MPI_Comm ic;
		MPI_Barrier(MPI_COMM_WORLD);
		double t0 = MPI_Wtime();
		MPI_Comm_spawn(argv[0], MPI_ARGV_NULL, k, MPI_INFO_NULL, 0, MPI_COMM_WORLD, &ic, MPI_ERRCODES_IGNORE);
		double t = MPI_Wtime() - t0;
		if (rank == 0) {
			int x = 0;
			for (int c = 0; c < k; c++)
				MPI_Send(&x, 1, MPI_INT, c, 1, ic);
			printf("spawn %d: %.2f ms\n", k, t * 1e3);
			fflush(stdout);
		}
		MPI_Comm_disconnect(&ic);
	}
	MPI_Finalize();
	return 0;
}
