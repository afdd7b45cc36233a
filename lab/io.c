/* io.c: rivet bench io's access patterns (IOR's) over MPI-IO, for
 * lab/io-vs-mpi.sh. Same flags, same per-repetition lines:
 *   io [-b BLOCK] [-t XFER] [-s SEGS] [-F] [-c] [-V] [-o PATH] [-i REPS] [-w] [-r] [-k]
 * Each phase is timed from a barrier, open to close, as the slowest
 * process saw it; every 4 KiB of the view holds a stamp, checked after
 * each read phase, untimed. */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static long long size(const char *s) {
	char *end;
	long long v = strtoll(s, &end, 10);
	switch (*end) {
	case 'k': case 'K': return v << 10;
	case 'm': case 'M': return v << 20;
	case 'g': case 'G': return v << 30;
	}
	return v;
}

static void stamp(char *buf, long long n, int r, long long off) {
	for (long long j = (4096 - off % 4096) % 4096; j + 8 <= n; j += 4096) {
		uint64_t v = (uint64_t)r << 48 | (uint64_t)(off + j);
		memcpy(buf + j, &v, 8);
	}
}

static int check(const char *buf, long long n, int r, long long off) {
	for (long long j = (4096 - off % 4096) % 4096; j + 8 <= n; j += 4096) {
		uint64_t v;
		memcpy(&v, buf + j, 8);
		if (v != ((uint64_t)r << 48 | (uint64_t)(off + j))) {
			fprintf(stderr, "rank %d: byte %lld of its view holds %#llx\n", r, off + j, (unsigned long long)v);
			return 1;
		}
	}
	return 0;
}

int main(int argc, char **argv) {
	long long block = 1 << 20, xfer = 1 << 20;
	int segs = 1, fpp = 0, coll = 0, view = 0, reps = 1, w = 0, rd = 0, keep = 0, c;
	const char *path = "/dev/shm/ompi-ior.dat";
	MPI_Init(&argc, &argv);
	while ((c = getopt(argc, argv, "b:t:s:FcVo:i:wrk")) != -1) {
		switch (c) {
		case 'b': block = size(optarg); break;
		case 't': xfer = size(optarg); break;
		case 's': segs = atoi(optarg); break;
		case 'F': fpp = 1; break;
		case 'c': coll = 1; break;
		case 'V': view = 1; break;
		case 'o': path = optarg; break;
		case 'i': reps = atoi(optarg); break;
		case 'w': w = 1; break;
		case 'r': rd = 1; break;
		case 'k': keep = 1; break;
		default: MPI_Abort(MPI_COMM_WORLD, 2);
		}
	}
	if (!w && !rd) w = rd = 1;
	int n, me;
	MPI_Comm_size(MPI_COMM_WORLD, &n);
	MPI_Comm_rank(MPI_COMM_WORLD, &me);
	MPI_Comm comm = MPI_COMM_WORLD;
	char name[4096];
	snprintf(name, sizeof name, "%s", path);
	if (fpp) {
		MPI_Comm_split(MPI_COMM_WORLD, me, 0, &comm);
		snprintf(name, sizeof name, "%s.%d", path, me);
	}
	/* Page-aligned, as IOR's aligned_buffer_alloc and rivet bench io's
	 * AllocMem: where a buffer starts within its page changes the speed
	 * of the kernel's copies on some CPUs (this machine's EPYC copies
	 * from the page cache 30% faster into a buffer 1-63 bytes past a page
	 * boundary than into an aligned one), and malloc's 16 would give the
	 * twin that edge. */
	char *buf = NULL;
	if (posix_memalign((void **)&buf, 4096, xfer)) MPI_Abort(MPI_COMM_WORLD, 2);
	memset(buf, 0, xfer);
	/* The calls: view offsets, as rivet bench io's. */
	long long ncalls = view ? block * segs / xfer : segs * (block / xfer), k = 0;
	long long *off = malloc(ncalls * sizeof *off);
	if (view) {
		for (long long v = 0; v < block * segs; v += xfer) off[k++] = v;
	} else {
		for (long long s = 0; s < segs; s++) {
			long long base = fpp ? s * block : (s * n + me) * block;
			for (long long j = 0; j < block; j += xfer) off[k++] = base + j;
		}
	}
	MPI_Datatype ft = MPI_DATATYPE_NULL;
	if (view) {
		MPI_Datatype v;
		MPI_Type_create_subarray(1, (int[]){(int)(block * n)}, (int[]){(int)block}, (int[]){(int)(block * me)}, MPI_ORDER_C, MPI_BYTE, &v);
		ft = v;
		MPI_Type_commit(&ft);
	}
	double total = (double)block * segs * n;
	if (me == 0) printf("%-9s %10s %10s %6s\n", "access", "bw(MiB/s)", "total(s)", "iter");
	for (int rep = 0; rep < reps; rep++) {
		for (int ph = 0; ph < 2; ph++) {
			int write = ph == 0;
			if ((write && !w) || (!write && !rd)) continue;
			MPI_Barrier(MPI_COMM_WORLD);
			double t0 = MPI_Wtime();
			MPI_File f;
			int amode = write ? MPI_MODE_CREATE | MPI_MODE_WRONLY : MPI_MODE_RDONLY;
			if (MPI_File_open(comm, name, amode, MPI_INFO_NULL, &f) != MPI_SUCCESS) MPI_Abort(MPI_COMM_WORLD, 1);
			if (view) MPI_File_set_view(f, 0, MPI_BYTE, ft, "native", MPI_INFO_NULL);
			for (k = 0; k < ncalls; k++) {
				MPI_Status st;
				int rc;
				if (write) {
					stamp(buf, xfer, me, off[k]);
					rc = coll ? MPI_File_write_at_all(f, off[k], buf, (int)xfer, MPI_BYTE, &st)
					          : MPI_File_write_at(f, off[k], buf, (int)xfer, MPI_BYTE, &st);
				} else {
					rc = coll ? MPI_File_read_at_all(f, off[k], buf, (int)xfer, MPI_BYTE, &st)
					          : MPI_File_read_at(f, off[k], buf, (int)xfer, MPI_BYTE, &st);
				}
				if (rc != MPI_SUCCESS) MPI_Abort(MPI_COMM_WORLD, 1);
			}
			MPI_File_close(&f);
			double t = MPI_Wtime() - t0, worst;
			MPI_Allreduce(&t, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
			if (me == 0) printf("%-9s %10.2f %10.4f %6d\n", write ? "write" : "read", total / (1 << 20) / worst, worst, rep);
		}
		if (rd) {
			MPI_File f;
			MPI_File_open(comm, name, MPI_MODE_RDONLY, MPI_INFO_NULL, &f);
			if (view) MPI_File_set_view(f, 0, MPI_BYTE, ft, "native", MPI_INFO_NULL);
			for (k = 0; k < ncalls; k++) {
				MPI_Status st;
				memset(buf, 0, xfer);
				MPI_File_read_at(f, off[k], buf, (int)xfer, MPI_BYTE, &st);
				if (check(buf, xfer, me, off[k])) MPI_Abort(MPI_COMM_WORLD, 3);
			}
			MPI_File_close(&f);
		}
	}
	MPI_Barrier(MPI_COMM_WORLD);
	if (!keep && (me == 0 || fpp)) unlink(name);
	free(buf);
	free(off);
	MPI_Finalize();
	return 0;
}
