// insncount is a QEMU TCG plugin that counts the guest instructions each
// vCPU executes, per translation block, and writes the counts out each
// time the guest runs the marker program (lab/qemu/mark.c). Under TCG
// the host's speed drifts by up to 2x for seconds at a time; instruction
// counts do not, so they compare two programs' work exactly.
//
// Build: gcc -O2 -shared -fPIC -o insncount.so insncount.c
// Use:   qemu-system-x86_64 ... -plugin /path/insncount.so,out=/path/counts
//
// Each marker run appends a section to out:
//
//	mark N
//	<pc hex> <insns> <atomics> <exit> <executions on vCPU 0> ... <on vCPU 7> <lookups on vCPU 0> ... <on vCPU 7>
//
// with a line for every block executed since the previous mark, and then
// resets the counts. <insns> is the block's length in instructions and
// <atomics> how many of them are atomic read-modify-writes (a lock
// prefix, or xchg with memory): under multi-threaded TCG each of those
// is a call into QEMU, not an inline instruction. <exit> is how the
// block ends (see exit_kind), and the lookups are how many of its
// executions were followed by a block that TCG could not chain it to, so
// that it looked the block up: a call into QEMU too. The
// plugin API is QEMU's public one (version 1, as in QEMU 7.2); its few
// declarations are written out here because Debian does not ship
// qemu-plugin.h.

#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef uint64_t qemu_plugin_id_t;
typedef struct qemu_info_t qemu_info_t;
struct qemu_plugin_tb;
struct qemu_plugin_insn;

enum qemu_plugin_cb_flags {
	QEMU_PLUGIN_CB_NO_REGS,
	QEMU_PLUGIN_CB_R_REGS,
	QEMU_PLUGIN_CB_RW_REGS,
};

typedef void (*qemu_plugin_vcpu_tb_trans_cb_t)(qemu_plugin_id_t id, struct qemu_plugin_tb *tb);
typedef void (*qemu_plugin_vcpu_udata_cb_t)(unsigned int vcpu_index, void *userdata);

void qemu_plugin_register_vcpu_tb_trans_cb(qemu_plugin_id_t id, qemu_plugin_vcpu_tb_trans_cb_t cb);
void qemu_plugin_register_vcpu_tb_exec_cb(struct qemu_plugin_tb *tb, qemu_plugin_vcpu_udata_cb_t cb,
                                          enum qemu_plugin_cb_flags flags, void *userdata);
size_t qemu_plugin_tb_n_insns(const struct qemu_plugin_tb *tb);
struct qemu_plugin_insn *qemu_plugin_tb_get_insn(const struct qemu_plugin_tb *tb, size_t idx);
char *qemu_plugin_insn_disas(const struct qemu_plugin_insn *insn);
uint64_t qemu_plugin_tb_vaddr(const struct qemu_plugin_tb *tb);
uint64_t qemu_plugin_insn_vaddr(const struct qemu_plugin_insn *insn);
size_t qemu_plugin_insn_size(const struct qemu_plugin_insn *insn);

#define EXPORT __attribute__((visibility("default")))

EXPORT int qemu_plugin_version = 1;

// The marker program's text is linked at this address (mark.c).
#define MARK_LO 0x13370000u
#define MARK_HI 0x13380000u

#define MAX_VCPUS 8

// A block: counts are per vCPU, so two vCPUs never race on one counter.
struct block {
	uint64_t pc;
	uint64_t n;       // instructions in the block
	uint64_t atomics; // atomic read-modify-writes among them
	char exit;        // how it ends: exit_kind
	uint64_t count[MAX_VCPUS];
	uint64_t lookups[MAX_VCPUS]; // executions that ended in a lookup
	struct block *next; // hash chain
	struct block *all;  // every block, for the dump
};

#define NBUCKETS (1u << 20)

static struct block **buckets;
static struct block *blocks;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static FILE *out;
static int marks;

#define PAGE_MASK (~(uint64_t)0xfff)

// last is each vCPU's previous block, so that each transition can be
// told chained or looked up; only its vCPU's thread touches it.
static struct block *last[MAX_VCPUS];

// looked_up reports whether TCG went from block a to block b by a lookup:
// always after a return, an indirect branch or a system instruction, and
// after a direct one only to another page than the one a starts on
// (translator_use_goto_tb). A jump across pages not taken costs nothing,
// so this is decided per transition, not per block.
static bool looked_up(const struct block *a, const struct block *b)
{
	switch (a->exit) {
	case 'r':
	case 'i':
	case 's':
		return true;
	}
	return ((a->pc ^ b->pc) & PAGE_MASK) != 0;
}

static void exec_block(unsigned int vcpu, void *udata)
{
	struct block *b = udata;
	unsigned v = vcpu < MAX_VCPUS ? vcpu : MAX_VCPUS - 1;
	// Atomic adds, because exec_mark takes its snapshots off them while
	// this vCPU runs on: a plain increment could write back a value from
	// before the snapshot was taken off.
	__atomic_fetch_add(&b->count[v], 1, __ATOMIC_RELAXED);
	struct block *a = last[v];
	if (a && looked_up(a, b))
		__atomic_fetch_add(&a->lookups[v], 1, __ATOMIC_RELAXED);
	last[v] = b;
}

static void exec_mark(unsigned int vcpu, void *udata)
{
	(void)udata;
	pthread_mutex_lock(&lock);
	fprintf(out, "mark %d vcpu %u\n", marks++, vcpu);
	for (struct block *b = blocks; b; b = b->all) {
		// The other vCPUs run on meanwhile: take the lookups before the
		// executions, so that a lookup counted is never one whose
		// execution is not (a block's execution comes before its
		// lookup), and take off what was counted, rather than clearing:
		// what came after the snapshot goes to the next section. So an
		// execution between the two reads is in this section and its
		// lookup in the next: a section may hold more lookups than
		// executions; the sum of the sections so far never does.
		uint64_t lookups[MAX_VCPUS], count[MAX_VCPUS];
		bool any = false;
		for (int i = 0; i < MAX_VCPUS; i++) {
			lookups[i] = __atomic_load_n(&b->lookups[i], __ATOMIC_ACQUIRE);
			any |= lookups[i] != 0;
		}
		for (int i = 0; i < MAX_VCPUS; i++) {
			count[i] = __atomic_load_n(&b->count[i], __ATOMIC_ACQUIRE);
			any |= count[i] != 0;
		}
		if (!any)
			continue;
		for (int i = 0; i < MAX_VCPUS; i++) {
			__atomic_fetch_sub(&b->count[i], count[i], __ATOMIC_RELAXED);
			__atomic_fetch_sub(&b->lookups[i], lookups[i], __ATOMIC_RELAXED);
		}
		fprintf(out, "%" PRIx64 " %" PRIu64 " %" PRIu64 " %c", b->pc, b->n, b->atomics, b->exit);
		for (int i = 0; i < MAX_VCPUS; i++)
			fprintf(out, " %" PRIu64, count[i]);
		for (int i = 0; i < MAX_VCPUS; i++)
			fprintf(out, " %" PRIu64, lookups[i]);
		fputc('\n', out);
	}
	fflush(out);
	pthread_mutex_unlock(&lock);
}

// exit_kind classifies how a block ends, by its last instruction. TCG
// chains a block straight into the next only for a direct jump within
// the page the block starts on (translator_use_goto_tb); every other
// exit looks the next block up in a helper, and a system instruction
// goes back to the main loop. Upper case: the target (C, J), a target
// (B) or the next instruction (O) is on another page than the block's
// start, so that exit is looked up when taken.
//
//	r  ret                     i  indirect call or jump
//	s  system (syscall, sysret, iret, int, hlt, wrmsr, a far jump)
//	c  direct call             C  to another page
//	j  direct jump             J  to another page
//	b  conditional branch      B  a target on another page
//	o  no branch (the block is full, or the next page starts)
//	O  likewise, into the next page
static char exit_kind(uint64_t pc, struct qemu_plugin_insn *last)
{
	char *d = qemu_plugin_insn_disas(last);
	uint64_t next = qemu_plugin_insn_vaddr(last) + qemu_plugin_insn_size(last);
	bool far_next = ((pc ^ next) & PAGE_MASK) != 0;
	char k = far_next ? 'O' : 'o';
	if (!d)
		return k;
	char op[16] = "";
	sscanf(d, "%15s", op);
	const char *arg = d + strlen(op);
	while (*arg == ' ')
		arg++;
	uint64_t dest = 0;
	bool direct = strncmp(arg, "0x", 2) == 0 && sscanf(arg, "%" SCNx64, &dest) == 1;
	bool far = ((pc ^ dest) & PAGE_MASK) != 0;
	if (strncmp(op, "ret", 3) == 0 || strncmp(op, "lret", 4) == 0)
		k = 'r';
	else if (strncmp(op, "call", 4) == 0 || strncmp(op, "jmp", 3) == 0)
		k = !direct ? 'i' : op[0] == 'c' ? (far ? 'C' : 'c') : (far ? 'J' : 'j');
	else if ((op[0] == 'j' || strncmp(op, "loop", 4) == 0) && direct)
		k = far || far_next ? 'B' : 'b';
	else if (strncmp(op, "sys", 3) == 0 || strncmp(op, "iret", 4) == 0 || strcmp(op, "hlt") == 0 ||
	         strncmp(op, "int", 3) == 0 || strncmp(op, "wrmsr", 5) == 0 || strncmp(op, "ljmp", 4) == 0)
		k = 's';
	free(d);
	return k;
}

static void translate(qemu_plugin_id_t id, struct qemu_plugin_tb *tb)
{
	(void)id;
	uint64_t pc = qemu_plugin_tb_vaddr(tb);
	uint64_t n = qemu_plugin_tb_n_insns(tb);
	if (pc >= MARK_LO && pc < MARK_HI) {
		qemu_plugin_register_vcpu_tb_exec_cb(tb, exec_mark, QEMU_PLUGIN_CB_NO_REGS, NULL);
		return;
	}
	char exit = exit_kind(pc, qemu_plugin_tb_get_insn(tb, n - 1));
	uint64_t atomics = 0;
	for (size_t i = 0; i < n; i++) {
		char *d = qemu_plugin_insn_disas(qemu_plugin_tb_get_insn(tb, i));
		if (d && (strncmp(d, "lock ", 5) == 0 || (strncmp(d, "xchg", 4) == 0 && (strchr(d, '(') || strchr(d, '[')))))
			atomics++;
		free(d);
	}
	// The same address may be translated again (another process, a
	// flushed cache); blocks with the same start and length share counts.
	uint64_t h = (pc ^ (pc >> 20) ^ (n << 7)) & (NBUCKETS - 1);
	pthread_mutex_lock(&lock);
	struct block *b = buckets[h];
	while (b && (b->pc != pc || b->n != n))
		b = b->next;
	if (!b) {
		b = calloc(1, sizeof *b);
		if (!b)
			abort();
		b->pc = pc;
		b->n = n;
		b->atomics = atomics;
		b->exit = exit;
		b->next = buckets[h];
		buckets[h] = b;
		b->all = blocks;
		blocks = b;
	}
	pthread_mutex_unlock(&lock);
	qemu_plugin_register_vcpu_tb_exec_cb(tb, exec_block, QEMU_PLUGIN_CB_NO_REGS, b);
}

EXPORT int qemu_plugin_install(qemu_plugin_id_t id, const qemu_info_t *info, int argc, char **argv)
{
	(void)info;
	const char *path = NULL;
	for (int i = 0; i < argc; i++)
		if (strncmp(argv[i], "out=", 4) == 0)
			path = argv[i] + 4;
	if (!path) {
		fprintf(stderr, "insncount: out=FILE is required\n");
		return -1;
	}
	if (!(out = fopen(path, "w"))) {
		perror(path);
		return -1;
	}
	if (!(buckets = calloc(NBUCKETS, sizeof *buckets)))
		return -1;
	qemu_plugin_register_vcpu_tb_trans_cb(id, translate);
	return 0;
}
