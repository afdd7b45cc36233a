//go:build linux

#include "textflag.h"

// func ringWrite(fd int, p unsafe.Pointer, n int) (r int, errno uintptr)
//
// write(2) straight from here: the doorbell is the one system call on
// every send's path, and syscall.RawSyscall reaches the instruction
// through three more calls, each a lookup under TCG.
TEXT ·ringWrite(SB), NOSPLIT, $0-40
	MOVQ fd+0(FP), DI
	MOVQ p+8(FP), SI
	MOVQ n+16(FP), DX
	MOVQ $1, AX // SYS_write
	SYSCALL
	CMPQ AX, $0xfffffffffffff001
	JLS  ok
	NEGQ AX
	MOVQ $-1, r+24(FP)
	MOVQ AX, errno+32(FP)
	RET
ok:
	MOVQ AX, r+24(FP)
	MOVQ $0, errno+32(FP)
	RET
