package fabric

import (
	"fmt"
	"strings"
	"testing"

	"github.com/rivet-hpc/rivet/internal/testutil"
)

// TestVerbsPointToPoint runs the point-to-point programs unchanged with
// every peer reached over verbs (RDMA loopback on one device, and spread
// over both devices of the rxe2 topology, so that frames cross between
// rxe0 and rxe1), on 2 and 4 ranks.
func TestVerbsPointToPoint(t *testing.T) {
	devs := testutil.RXEDevices(t)
	placements := map[string]string{"one-device": devs[0]}
	if len(devs) > 1 {
		placements["two-devices"] = strings.Join(devs, ",")
	}
	for name, dev := range placements {
		for _, n := range []int{2, 4} {
			for _, prog := range []string{"sizes", "order", "fair", "many", "cancel", "probe", "badinput", "comms"} {
				switch prog {
				case "order", "fair", "many", "comms":
					if n != 4 {
						continue // these are written for 4 ranks
					}
				case "cancel", "probe", "badinput":
					if n != 2 {
						continue // and these for 2
					}
				}
				t.Run(fmt.Sprintf("%s/%d/%s", name, n, prog), func(t *testing.T) {
					out := runOK(t, n, prog, "RIVET_PROVIDER=verbs", "RIVET_VERBS_DEVICE="+dev)
					_ = out
				})
			}
		}
	}
}
