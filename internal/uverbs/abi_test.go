//go:build linux

package uverbs

import (
	"encoding/binary"
	"errors"
	"os"
	"strconv"
	"strings"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// TestABISizes pins every struct to the size pahole reports for the 6.1
// UAPI headers, read from testdata/verbs-abi-sizes.txt ("name size" per
// line); a request that carries rxe's driver data is the sum of both.
func TestABISizes(t *testing.T) {
	pahole := readSizes(t, "testdata/verbs-abi-sizes.txt")
	for name, got := range map[string]uintptr{
		"ib_uverbs_query_device_resp":                   unsafe.Sizeof(QueryDeviceResp{}),
		"ib_uverbs_query_port":                          unsafe.Sizeof(queryPort{}),
		"ib_uverbs_query_port_resp":                     unsafe.Sizeof(PortAttr{}),
		"ib_uverbs_reg_mr":                              unsafe.Sizeof(regMR{}),
		"ib_uverbs_reg_mr_resp":                         unsafe.Sizeof(RegMRResp{}),
		"ib_uverbs_create_cq":                           unsafe.Sizeof(createCQ{}),
		"ib_uverbs_create_cq_resp+rxe_create_cq_resp":   unsafe.Sizeof(CreateCQResp{}),
		"ib_uverbs_req_notify_cq":                       unsafe.Sizeof(reqNotifyCQ{}),
		"ib_uverbs_destroy_cq":                          unsafe.Sizeof(destroy{}),
		"ib_uverbs_destroy_cq_resp":                     unsafe.Sizeof(DestroyCQResp{}),
		"ib_uverbs_create_srq":                          unsafe.Sizeof(CreateSRQ{}),
		"ib_uverbs_create_srq_resp+rxe_create_srq_resp": unsafe.Sizeof(CreateSRQResp{}),
		"ib_uverbs_create_qp":                           unsafe.Sizeof(CreateQP{}),
		"ib_uverbs_create_qp_resp+rxe_create_qp_resp":   unsafe.Sizeof(CreateQPResp{}),
		"ib_uverbs_modify_qp":                           unsafe.Sizeof(ModifyQP{}),
		"ib_uverbs_query_qp":                            unsafe.Sizeof(queryQP{}),
		"ib_uverbs_query_qp_resp":                       unsafe.Sizeof(QueryQPResp{}),
		"ib_uverbs_post_send":                           unsafe.Sizeof(postSend{}),
		"ib_uverbs_wc":                                  unsafe.Sizeof(WC{}),
		"ib_uverbs_async_event_desc":                    unsafe.Sizeof(AsyncEventDesc{}),
		"mminfo":                                        unsafe.Sizeof(MMInfo{}),
	} {
		var want uintptr
		for _, part := range strings.Split(name, "+") {
			n, ok := pahole[part]
			if !ok {
				t.Fatalf("%s: not in the pahole dump", part)
			}
			want += n
		}
		if got != want {
			t.Errorf("%s: %d bytes, want %d", name, got, want)
		}
	}
	// Not in the dump: from the 6.1 UAPI header's field lists.
	for name, c := range map[string][2]uintptr{
		"ib_uverbs_qp_dest":   {unsafe.Sizeof(QPDest{}), 32},
		"ib_uverbs_ioctl_hdr": {unsafe.Sizeof(ioctlHdr{}), 24},
		"ib_uverbs_attr":      {unsafe.Sizeof(ioctlAttr{}), 16},
		"ib_uverbs_gid_entry": {unsafe.Sizeof(GIDEntry{}), 32},
	} {
		if c[0] != c[1] {
			t.Errorf("%s: %d bytes, want %d", name, c[0], c[1])
		}
	}
}

// readSizes reads a pahole size dump: "name size" per line.
func readSizes(t *testing.T, path string) map[string]uintptr {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]uintptr{}
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) != 2 {
			continue
		}
		n, err := strconv.Atoi(f[1])
		if err != nil {
			t.Fatalf("%s: %q", path, l)
		}
		m[f[0]] = uintptr(n)
	}
	return m
}

// TestABIOffsets spot-checks fields pahole places
// (testdata/verbs-abi-layouts.txt).
func TestABIOffsets(t *testing.T) {
	var m ModifyQP
	var q QueryQPResp
	var p PortAttr
	var d QueryDeviceResp
	var w WC
	var h ioctlHdr
	var at ioctlAttr
	var g GIDEntry
	for name, c := range map[string][2]uintptr{
		"modify_qp.qp_handle":             {unsafe.Offsetof(m.QPHandle), 64},
		"modify_qp.qp_state":              {unsafe.Offsetof(m.QPState), 96},
		"modify_qp.timeout":               {unsafe.Offsetof(m.Timeout), 105},
		"modify_qp.rnr_retry":             {unsafe.Offsetof(m.RNRRetry), 107},
		"query_qp_resp.qp_state":          {unsafe.Offsetof(q.QPState), 108},
		"query_qp_resp.sq_sig_all":        {unsafe.Offsetof(q.SQSigAll), 122},
		"query_port_resp.state":           {unsafe.Offsetof(p.State), 26},
		"query_port_resp.link_layer":      {unsafe.Offsetof(p.LinkLayer), 37},
		"query_device_resp.atomic_cap":    {unsafe.Offsetof(d.AtomicCap), 108},
		"query_device_resp.phys_port_cnt": {unsafe.Offsetof(d.PhysPortCnt), 171},
		"wc.qp_num":                       {unsafe.Offsetof(w.QPNum), 28},
		"wc.port_num":                     {unsafe.Offsetof(w.PortNum), 46},
		"ioctl_hdr.driver_id":             {unsafe.Offsetof(h.DriverID), 16},
		"attr.data":                       {unsafe.Offsetof(at.Data), 8},
		"gid_entry.gid_index":             {unsafe.Offsetof(g.GIDIndex), 16},
		"gid_entry.netdev_ifindex":        {unsafe.Offsetof(g.NetdevIfindex), 28},
	} {
		if c[0] != c[1] {
			t.Errorf("%s at %d, want %d", name, c[0], c[1])
		}
	}
}

// TestPortAttrOffsets decodes a response with marker bytes at the offsets
// pahole reports for ib_uverbs_query_port_resp.
func TestPortAttrOffsets(t *testing.T) {
	resp := make([]byte, 40)
	binary.NativeEndian.PutUint32(resp[16:], 256)    // gid_tbl_len
	binary.NativeEndian.PutUint16(resp[22:], 0x1234) // lid
	resp[26], resp[27], resp[28], resp[36], resp[37] = 4, 5, 3, 5, 2
	a := *(*PortAttr)(unsafe.Pointer(&resp[0]))
	if a.GIDTableLen != 256 || a.LID != 0x1234 || a.State != 4 || a.MaxMTU != 5 || a.ActiveMTU != 3 ||
		a.PhysState != 5 || a.LinkLayer != 2 {
		t.Errorf("decoded %+v", a)
	}
}

func TestOpenMissing(t *testing.T) {
	if _, err := Open("/nonexistent/uverbs9"); !errors.Is(err, unix.ENOENT) {
		t.Errorf("Open: %v, want ENOENT", err)
	}
}
