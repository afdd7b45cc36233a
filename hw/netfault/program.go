//go:build linux

package netfault

import (
	"encoding/binary"
	"fmt"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
)

// direction says which address of a packet is the peer's.
type direction int

const (
	egress  direction = iota // the destination
	ingress                  // the source
)

// The counts map's slots.
const (
	countDropped = 0
	countSeen    = 1
)

// tc's verdicts for a direct-action program.
const (
	actOK     = 0 // TC_ACT_OK: pass
	actShot   = 2 // TC_ACT_SHOT: drop, and tell the sender's stack so
	actStolen = 4 // TC_ACT_STOLEN: drop, and tell the sender it was sent
)

// drop is the verdict that loses a packet the way a network does. On
// egress that is TC_ACT_STOLEN: the sender hears NET_XMIT_SUCCESS, as it
// would of a frame a switch later loses. TC_ACT_SHOT there would hand it
// NET_XMIT_DROP, a local send failure, which no wire can cause — and
// which soft-RoCE takes badly: on Linux 6.1 its responder answers a read
// reply it could not send with an RNR NAK, and its requester, in the
// middle of that read's responses, moves the queue pair to the error
// state with no error completion (a WARN in rxe_comp.c) — a live peer
// lost to the injector, not to the loss.
func (d direction) drop() int32 {
	if d == egress {
		return actStolen
	}
	return actShot
}

// Offsets in an Ethernet frame carrying IPv4.
const (
	offEtherType = 12
	offIPv4      = 14
	offProto     = offIPv4 + 9
	offSrc       = offIPv4 + 12
	offDst       = offIPv4 + 16
)

// native reads two bytes in network order as the program's 16-bit loads
// see them.
func native(b0, b1 byte) int32 { return int32(binary.NativeEndian.Uint16([]byte{b0, b1})) }

// program assembles and loads the program for one hook. In C it would be:
//
//	if eth.proto != IPv4 || ip.proto != UDP || udp.dest != 4791: pass
//	counts[seen]++
//	p := rules[peer] ?: rules[0] ?: pass
//	if prandom() % 1e6 >= p: pass
//	counts[dropped]++; drop
//
// reading the packet with bpf_skb_load_bytes, which bounds every read.
func (in *Injector) program(d direction) (*ebpf.Program, error) {
	peerOff := int32(offDst)
	if d == ingress {
		peerOff = offSrc
	}
	const scratch = -8 // the stack slot packet bytes and map keys go through
	load := func(off int32, n int32) asm.Instructions {
		return asm.Instructions{
			asm.Mov.Reg(asm.R1, asm.R6),
			asm.Mov.Imm(asm.R2, off),
			asm.Mov.Reg(asm.R3, asm.RFP),
			asm.Add.Imm(asm.R3, scratch),
			asm.Mov.Imm(asm.R4, n),
			asm.FnSkbLoadBytes.Call(),
			asm.JNE.Imm(asm.R0, 0, "pass"),
		}
	}
	count := func(slot int32, label string) asm.Instructions {
		return asm.Instructions{
			asm.StoreImm(asm.RFP, scratch, int64(slot), asm.Word),
			asm.LoadMapPtr(asm.R1, in.counts.FD()),
			asm.Mov.Reg(asm.R2, asm.RFP),
			asm.Add.Imm(asm.R2, scratch),
			asm.FnMapLookupElem.Call(),
			asm.JEq.Imm(asm.R0, 0, label),
			asm.Mov.Imm(asm.R1, 1),
			asm.StoreXAdd(asm.R0, asm.R1, asm.DWord),
			asm.Mov.Imm(asm.R0, 0).WithSymbol(label),
		}
	}
	lookup := asm.Instructions{
		asm.LoadMapPtr(asm.R1, in.rules.FD()),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, scratch),
		asm.FnMapLookupElem.Call(),
	}
	var insns asm.Instructions
	insns = append(insns, asm.Mov.Reg(asm.R6, asm.R1))
	insns = append(insns, load(offEtherType, 2)...)
	insns = append(insns,
		asm.LoadMem(asm.R0, asm.RFP, scratch, asm.Half),
		asm.JNE.Imm(asm.R0, native(0x08, 0x00), "pass"))
	insns = append(insns, load(offIPv4, 1)...)
	insns = append(insns,
		asm.LoadMem(asm.R7, asm.RFP, scratch, asm.Byte),
		asm.And.Imm(asm.R7, 0xf),
		asm.LSh.Imm(asm.R7, 2), // the IPv4 header's length
		asm.JLT.Imm(asm.R7, 20, "pass"))
	insns = append(insns, load(offProto, 1)...)
	insns = append(insns,
		asm.LoadMem(asm.R0, asm.RFP, scratch, asm.Byte),
		asm.JNE.Imm(asm.R0, 17, "pass"), // UDP
		// The destination port, after the IPv4 header.
		asm.Mov.Reg(asm.R1, asm.R6),
		asm.Mov.Reg(asm.R2, asm.R7),
		asm.Add.Imm(asm.R2, offIPv4+2),
		asm.Mov.Reg(asm.R3, asm.RFP),
		asm.Add.Imm(asm.R3, scratch),
		asm.Mov.Imm(asm.R4, 2),
		asm.FnSkbLoadBytes.Call(),
		asm.JNE.Imm(asm.R0, 0, "pass"),
		asm.LoadMem(asm.R0, asm.RFP, scratch, asm.Half),
		asm.JNE.Imm(asm.R0, native(RoCEPort>>8, RoCEPort&0xff), "pass"))
	insns = append(insns, count(countSeen, "seen")...)
	insns = append(insns, load(peerOff, 4)...)
	insns = append(insns, lookup...)
	insns = append(insns,
		asm.JNE.Imm(asm.R0, 0, "rule"),
		asm.StoreImm(asm.RFP, scratch, 0, asm.Word)) // every peer
	insns = append(insns, lookup...)
	insns = append(insns,
		asm.JEq.Imm(asm.R0, 0, "pass"),
		asm.LoadMem(asm.R8, asm.R0, 0, asm.Word).WithSymbol("rule"),
		asm.FnGetPrandomU32.Call(),
		asm.Mod.Imm(asm.R0, ppm),
		asm.JGE.Reg(asm.R0, asm.R8, "pass"))
	insns = append(insns, count(countDropped, "dropped")...)
	insns = append(insns,
		asm.Mov.Imm(asm.R0, d.drop()),
		asm.Return(),
		asm.Mov.Imm(asm.R0, actOK).WithSymbol("pass"),
		asm.Return())
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Name: "netfault", Type: ebpf.SchedCLS, License: "GPL", Instructions: insns,
	})
	if err != nil {
		return nil, fmt.Errorf("netfault: loading the program: %w: %v", ErrNotSupported, err)
	}
	return prog, nil
}
