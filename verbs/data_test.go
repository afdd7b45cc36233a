package verbs

import (
	"bytes"
	"testing"
	"time"
)

func TestWriteSmoke(t *testing.T) {
	for _, p := range devicePairs(t) {
		t.Run(p[0]+"-"+p[1], func(t *testing.T) {
			a, b := connectPair(t, p[0], p[1], sideConfig{})
			copy(a.mr.Bytes(), "hello, rdma")
			err := a.qp.PostSend(SendWR{ID: 7, Op: OpRDMAWrite, Flags: Signaled,
				Local: []SGE{{MR: a.mr, Length: 11}}, Remote: b.mr.Remote()})
			if err != nil {
				t.Fatal(err)
			}
			wc := waitWC(t, a.scq, 1, 5*time.Second)
			mustOK(t, wc)
			if wc[0].ID != 7 || wc[0].Opcode != WCRDMAWrite {
				t.Errorf("completion %+v", wc[0])
			}
			if !bytes.Equal(b.mr.Bytes()[:11], []byte("hello, rdma")) {
				t.Errorf("remote holds %q", b.mr.Bytes()[:11])
			}
		})
	}
}
