#include "textflag.h"

// SUM64 adds in to inout element-wise, 64 bytes per iteration, with the
// SSE2 instruction OP (packed add of one lane width). It covers the first
// len(inout) &^ 63 bytes; the caller adds the rest. in is at least as long.
#define SUM64(OP) \
	MOVQ in_base+0(FP), SI \
	MOVQ inout_base+24(FP), DI \
	MOVQ inout_len+32(FP), CX \
	SHRQ $6, CX \
	JZ   done \
loop: \
	MOVOU 0(SI), X0 \
	MOVOU 16(SI), X1 \
	MOVOU 32(SI), X2 \
	MOVOU 48(SI), X3 \
	MOVOU 0(DI), X4 \
	MOVOU 16(DI), X5 \
	MOVOU 32(DI), X6 \
	MOVOU 48(DI), X7 \
	OP    X4, X0 \
	OP    X5, X1 \
	OP    X6, X2 \
	OP    X7, X3 \
	MOVOU X0, 0(DI) \
	MOVOU X1, 16(DI) \
	MOVOU X2, 32(DI) \
	MOVOU X3, 48(DI) \
	ADDQ  $64, SI \
	ADDQ  $64, DI \
	DECQ  CX \
	JNZ   loop \
done: \
	RET

// func sum8x64(in, inout []byte)
TEXT ·sum8x64(SB), NOSPLIT, $0-48
	SUM64(PADDB)

// func sum16x64(in, inout []byte)
TEXT ·sum16x64(SB), NOSPLIT, $0-48
	SUM64(PADDW)

// func sum32x64(in, inout []byte)
TEXT ·sum32x64(SB), NOSPLIT, $0-48
	SUM64(PADDL)

// func sum64x64(in, inout []byte)
TEXT ·sum64x64(SB), NOSPLIT, $0-48
	SUM64(PADDQ)

// func sumF32x64(in, inout []byte)
TEXT ·sumF32x64(SB), NOSPLIT, $0-48
	SUM64(ADDPS)

// func sumF64x64(in, inout []byte)
TEXT ·sumF64x64(SB), NOSPLIT, $0-48
	SUM64(ADDPD)
