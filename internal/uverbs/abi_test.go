package uverbs

import (
	"encoding/binary"
	"testing"
)

// The sizes of struct ib_uverbs_query_port_resp and friends, from the
// pahole dump of the 6.1 UAPI headers (shared/design/verbs-abi-sizes.txt).
func TestABISizes(t *testing.T) {
	if n := binary.Size(PortAttr{}); n != 40 {
		t.Errorf("PortAttr is %d bytes, want 40 (ib_uverbs_query_port_resp)", n)
	}
}

func TestWriteRejectsBadFraming(t *testing.T) {
	if err := write(-1, "TEST", 0, make([]byte, 6), nil); err == nil {
		t.Error("a request that is not a multiple of 4 bytes was accepted")
	}
	err := write(-1, "TEST", 0, make([]byte, 8), nil)
	if err == nil || err.Error() != "uverbs TEST: bad file descriptor" {
		t.Errorf("write to fd -1: %v", err)
	}
}

// TestPortAttrOffsets decodes a response with marker bytes at the offsets
// pahole reports for ib_uverbs_query_port_resp.
func TestPortAttrOffsets(t *testing.T) {
	resp := make([]byte, 40)
	binary.NativeEndian.PutUint32(resp[16:], 256)    // gid_tbl_len
	binary.NativeEndian.PutUint16(resp[22:], 0x1234) // lid
	resp[26], resp[27], resp[28], resp[36], resp[37] = 4, 5, 3, 5, 2
	var a PortAttr
	if _, err := binary.Decode(resp, binary.NativeEndian, &a); err != nil {
		t.Fatal(err)
	}
	if a.GIDTableLen != 256 || a.LID != 0x1234 || a.State != 4 || a.MaxMTU != 5 || a.ActiveMTU != 3 ||
		a.PhysState != 5 || a.LinkLayer != 2 {
		t.Errorf("decoded %+v", a)
	}
}
