// tcgcost times, in the guest, what the insncount plugin counts: a plain
// instruction, one that touches memory, a block boundary TCG chains, a
// lookup (a jump to another page; a return) and an atomic
// read-modify-write. Each variant is the loop of plain() plus the thing
// measured; rounds alternate the variants, and each unit's cost is the
// median over rounds of a difference between two variants in the same
// round, so the host's slow and fast spells cancel.
//
// Build: gcc -O2 -static -o tcgcost tcgcost.c
// Run:   bin/rxevm -q -topology none ./tcgcost
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static long mem;

#define LOOP_HEAD "1:\tadd $1,%%rax\n\tadd $1,%%rbx\n"
#define LOOP_TAIL "\tadd $1,%%rdi\n\tadd $1,%%r8\n\tdec %0\n\tjnz 1b"
#define CLOBBER "rax", "rbx", "rdx", "rsi", "rdi", "r8", "memory"

static void plain(long n)
{
	__asm__ volatile(LOOP_HEAD "\tadd $1,%%rdx\n\tadd $1,%%rsi\n" LOOP_TAIL : "+c"(n) : : CLOBBER);
}

// Two more blocks, each entered by a jump TCG chains (same page).
static void blocks(long n)
{
	__asm__ volatile(LOOP_HEAD "\tjmp 2f\n2:\tadd $1,%%rdx\n\tadd $1,%%rsi\n\tjmp 3f\n3:" LOOP_TAIL : "+c"(n) : : CLOBBER);
}

// A call (chained) and a return (looked up): two more blocks, one lookup.
static void callret(long n)
{
	__asm__ volatile("\tjmp 1f\n5:\tadd $1,%%rdx\n\tret\n" LOOP_HEAD "\tcall 5b\n\tadd $1,%%rsi\n" LOOP_TAIL
			 : "+c"(n) : : CLOBBER);
}

// A jump to the next page and one back: the blocks of blocks(), with
// both jumps looked up.
static void farjmp(long n)
{
	__asm__ volatile(LOOP_HEAD "\tjmp 2f\n3:" LOOP_TAIL "\n\tjmp 4f\n\t.p2align 12\n2:\tadd $1,%%rdx\n\tadd $1,%%rsi\n\tjmp 3b\n4:"
			 : "+c"(n) : : CLOBBER);
}

// One atomic add to memory.
static void atomic(long n)
{
	__asm__ volatile(LOOP_HEAD "\tlock addq $1,%1\n\tadd $1,%%rsi\n" LOOP_TAIL : "+c"(n), "+m"(mem) : : CLOBBER);
}

// Eight more instructions that load or store memory.
static void memory(long n)
{
	__asm__ volatile(LOOP_HEAD "\tadd $1,%%rdx\n\tadd $1,%%rsi\n"
			 "\taddq $1,%1\n\taddq $1,%1\n\taddq $1,%1\n\taddq $1,%1\n"
			 "\tmov %1,%%rax\n\tmov %1,%%rbx\n\tmov %1,%%rdx\n\tmov %%rax,%1\n" LOOP_TAIL
			 : "+c"(n), "+m"(mem) : : CLOBBER);
}

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1e9 + t.tv_nsec;
}

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

int main(void)
{
	// Each unit's cost: (variant - base) / per.
	static const struct {
		const char *unit;
		int variant, base;
		double per;
	} u[] = {
		{"register instruction (plain loop / 8)", 0, -1, 8},
		{"memory instruction", 1, 0, 8},
		{"chained block", 2, 0, 2},
		{"lookup (jump to another page)", 4, 2, 2},
		{"call and return (a lookup, a push, a pop)", 3, 2, 1},
		{"atomic read-modify-write", 5, 0, 1},
	};
	static const struct {
		void (*f)(long);
	} v[] = {{plain}, {memory}, {blocks}, {callret}, {farjmp}, {atomic}};
	enum { N = sizeof v / sizeof v[0], R = 31 };
	static double t[N][R];
	const long n = 2000000;
	for (int r = 0; r < R; r++)
		for (int i = 0; i < N; i++) {
			double s = now();
			v[i].f(n);
			t[i][r] = (now() - s) / n;
		}
	printf("guest ns per unit, median of %d rounds [quartiles]\n", R);
	for (size_t k = 0; k < sizeof u / sizeof u[0]; k++) {
		double d[R];
		for (int r = 0; r < R; r++)
			d[r] = (t[u[k].variant][r] - (u[k].base < 0 ? 0 : t[u[k].base][r])) / u[k].per;
		qsort(d, R, sizeof d[0], cmp);
		printf("%6.2f [%5.2f-%5.2f]  %s\n", d[R / 2], d[R / 4], d[3 * R / 4], u[k].unit);
	}
	return 0;
}
