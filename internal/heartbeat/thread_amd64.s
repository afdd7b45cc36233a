//go:build linux

#include "textflag.h"

// The args struct (heartbeat.go).
#define A_STOP 0
#define A_TID 8
#define A_PERIOD 16
#define A_N 32
#define A_WORDS 40
#define A_NF 72
#define A_FENCES 80
#define A_STATUS 112
#define A_MSGLEN 120
#define A_MSG 128

// CLONE_VM|CLONE_FS|CLONE_FILES|CLONE_SIGHAND|CLONE_THREAD|CLONE_SYSVSEM|
// CLONE_PARENT_SETTID|CLONE_CHILD_CLEARTID
#define FLAGS $0x350f00

// func spawn(a unsafe.Pointer, stack uintptr) (tid int, errno uintptr)
TEXT ·spawn(SB), NOSPLIT, $16-32
	// Block every signal in this thread, which the new one inherits: no
	// signal may be delivered to a thread the runtime does not know.
	MOVQ $-1, mask-16(SP)
	MOVQ $14, AX // rt_sigprocmask
	MOVQ $2, DI  // SIG_SETMASK
	LEAQ mask-16(SP), SI
	LEAQ old-8(SP), DX
	MOVQ $8, R10
	SYSCALL

	MOVQ a+0(FP), R12 // kept in the child: clone copies the registers
	MOVQ stack+8(FP), SI
	MOVQ FLAGS, DI
	LEAQ A_TID(R12), DX  // parent_tid
	LEAQ A_TID(R12), R10 // child_tid
	XORQ R8, R8          // tls
	MOVQ $56, AX         // clone
	SYSCALL
	CMPQ AX, $0
	JEQ  child
	MOVQ AX, R13

	// Back in the caller's thread: its own mask again.
	MOVQ $14, AX
	MOVQ $2, DI
	LEAQ old-8(SP), SI
	XORQ DX, DX
	MOVQ $8, R10
	SYSCALL

	CMPQ R13, $0xfffffffffffff001
	JLS  ok
	NEGQ R13
	MOVQ $-1, tid+16(FP)
	MOVQ R13, errno+24(FP)
	RET
ok:
	MOVQ R13, tid+16(FP)
	MOVQ $0, errno+24(FP)
	RET

child:
	// The heartbeat: until stop is set, end the process if a fence word
	// is set, add one to each word, then sleep a period in
	// futex(stop, WAIT, 0) so that Stop can wake it.
	MOVL A_STOP(R12), AX
	TESTL AX, AX
	JNE  exit
	MOVQ A_NF(R12), CX
	LEAQ A_FENCES(R12), BX
fences:
	TESTQ CX, CX
	JEQ   beat
	MOVQ  (BX), DX
	MOVQ  (DX), AX
	TESTQ AX, AX
	JNE   fenced
	ADDQ  $8, BX
	DECQ  CX
	JMP   fences
beat:
	MOVQ A_N(R12), CX
	LEAQ A_WORDS(R12), BX
words:
	TESTQ CX, CX
	JEQ   sleep
	MOVQ  (BX), DX
	LOCK
	INCQ  (DX)
	ADDQ  $8, BX
	DECQ  CX
	JMP   words
sleep:
	MOVQ $202, AX          // futex
	LEAQ A_STOP(R12), DI
	MOVQ $128, SI          // FUTEX_WAIT|FUTEX_PRIVATE_FLAG
	XORQ DX, DX            // while stop is 0
	LEAQ A_PERIOD(R12), R10
	XORQ R8, R8
	XORQ R9, R9
	SYSCALL
	JMP  child
exit:
	MOVQ $60, AX // exit: this thread only
	XORQ DI, DI
	SYSCALL
	JMP  exit
fenced:
	MOVQ $1, AX // write(2, msg, len)
	MOVQ $2, DI
	LEAQ A_MSG(R12), SI
	MOVQ A_MSGLEN(R12), DX
	SYSCALL
	MOVQ $231, AX // exit_group: the whole process
	MOVQ A_STATUS(R12), DI
	SYSCALL
	JMP  fenced
