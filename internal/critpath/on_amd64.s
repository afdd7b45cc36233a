//go:build rivetprobe

#include "textflag.h"

// func Now() uint64
TEXT ·Now(SB), NOSPLIT, $0-8
	RDTSC
	SHLQ $32, DX
	ORQ  DX, AX
	MOVQ AX, ret+0(FP)
	RET
