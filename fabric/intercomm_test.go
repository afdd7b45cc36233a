//go:build linux

package fabric

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"testing"
)

func init() { progs.Add("intercomm", progIntercomm) }

// halves splits the world into the even world ranks (group 0) and the
// odd ones (group 1) and makes their intercommunicator, the leaders being
// world ranks 0 and 1.
func halves(ctx context.Context, ep *Endpoint) (local, ic *Comm, color int) {
	w := ep.World()
	color = w.Rank() % 2
	local, err := w.Split(ctx, color, w.Rank())
	must(err, "split")
	ic, err = local.IntercommCreate(ctx, 0, w, 1-color, 5)
	must(err, "intercomm create")
	return local, ic, color
}

// members are the world ranks of group color (0 even, 1 odd) of n.
func members(n, color int) []int {
	var m []int
	for r := color; r < n; r += 2 {
		m = append(m, r)
	}
	return m
}

// progIntercomm: the even and odd world ranks make an intercommunicator;
// its sizes, groups and point-to-point (named sources and AnySource) are
// right; Merge orders the groups by high, then by leader; revoking it at
// one process ends a receive at every other, in both groups; what an
// intercommunicator does not take is refused.
func progIntercomm(ctx context.Context, ep *Endpoint) error {
	w := ep.World()
	n, me := w.Size(), w.Rank()
	local, ic, color := halves(ctx, ep)
	mine, theirs := members(n, color), members(n, 1-color)
	if !ic.IsInter() || local.IsInter() || ic.Size() != len(mine) || ic.RemoteSize() != len(theirs) ||
		ic.Rank() != local.Rank() || !slices.Equal(ic.Group().Members(), mine) || !slices.Equal(ic.RemoteGroup().Members(), theirs) {
		failf("intercommunicator: inter %v, size %d, remote %d, rank %d, group %v, remote group %v", ic.IsInter(), ic.Size(), ic.RemoteSize(), ic.Rank(), ic.Group().Members(), ic.RemoteGroup().Members())
	}
	if ic.LocalFirst() != (color == 0) || !slices.Equal(ic.Bridge().Group().Members(), slices.Concat(members(n, 0), members(n, 1))) {
		failf("bridge %v, local first %v", ic.Bridge().Group().Members(), ic.LocalFirst())
	}
	// Every process sends its world rank to every remote rank, and
	// receives from each by name; then to remote rank 0, which takes them
	// from AnySource.
	var buf [8]byte
	for r := range ic.RemoteSize() {
		binary.LittleEndian.PutUint64(buf[:], uint64(me))
		must(ic.Send(ctx, buf[:], r, 1), "send across")
	}
	for r := range ic.RemoteSize() {
		st, err := ic.Recv(ctx, buf[:], r, 1)
		must(err, "receive across")
		if got := int(binary.LittleEndian.Uint64(buf[:])); got != theirs[r] || st.Source != r {
			failf("from remote rank %d: world rank %d, source %d; want %d", r, got, st.Source, theirs[r])
		}
	}
	binary.LittleEndian.PutUint64(buf[:], uint64(me))
	must(ic.Send(ctx, buf[:], 0, 2), "send to remote rank 0")
	if ic.Rank() == 0 {
		seen := map[int]bool{}
		for range ic.RemoteSize() {
			st, err := ic.Recv(ctx, buf[:], AnySource, 2)
			must(err, "receive from any source")
			if got := int(binary.LittleEndian.Uint64(buf[:])); st.Source < 0 || st.Source >= len(theirs) || theirs[st.Source] != got || seen[got] {
				failf("any source: world rank %d from source %d", got, st.Source)
			}
			seen[int(binary.LittleEndian.Uint64(buf[:]))] = true
		}
	}
	// Merge: high false first; equal highs, the lower leader (world 0).
	for _, c := range []struct {
		high  [2]bool
		first int
	}{{[2]bool{false, true}, 0}, {[2]bool{true, false}, 1}, {[2]bool{false, false}, 0}, {[2]bool{true, true}, 0}} {
		m, err := ic.Merge(ctx, c.high[color])
		must(err, "merge")
		want := slices.Concat(members(n, c.first), members(n, 1-c.first))
		if m.IsInter() || !slices.Equal(m.Group().Members(), want) || m.Rank() != slices.Index(want, me) {
			failf("merge with highs %v: %v, rank %d; want %v", c.high, m.Group().Members(), m.Rank(), want)
		}
		got := make([]byte, 1)
		_, err = m.Sendrecv(ctx, []byte{byte(m.Rank())}, (m.Rank()+1)%n, 3, got, (m.Rank()+n-1)%n, 3)
		must(err, "sendrecv on the merged communicator")
		if int(got[0]) != (m.Rank()+n-1)%n {
			failf("merged ring: got %d", got[0])
		}
		must(m.Free(), "free the merged communicator")
	}
	// Refused: intracommunicator calls, and freeing a part.
	if _, err := ic.Dup(ctx); !errors.Is(err, ErrComm) {
		failf("Dup of an intercommunicator: %v", err)
	}
	if _, err := ic.Split(ctx, 0, 0); !errors.Is(err, ErrComm) {
		failf("Split of an intercommunicator: %v", err)
	}
	if _, err := w.Merge(ctx, false); !errors.Is(err, ErrComm) {
		failf("Merge of an intracommunicator: %v", err)
	}
	if err := ic.Local().Free(); !errors.Is(err, ErrComm) {
		failf("Free of an intercommunicator's part: %v", err)
	}
	if _, err := ic.IntercommCreate(ctx, 0, w, 0, 1); !errors.Is(err, ErrComm) {
		failf("IntercommCreate over an intercommunicator: %v", err)
	}
	// Revoke: world rank 1 (group 1's rank 0) revokes; every other
	// process, in either group, is in a receive that never matches.
	_, err := w.allgatherInternal(ctx, allRanks(n), 77, nil) // a barrier
	must(err, "barrier")
	if me == 1 {
		must(ic.Revoke(), "revoke")
	} else if _, err := ic.Recv(ctx, buf[:], 0, 99); !errors.Is(err, ErrRevoked) {
		failf("receive on the revoked intercommunicator: %v", err)
	}
	if !ic.IsRevoked() || !ic.Local().IsRevoked() || !ic.Bridge().IsRevoked() {
		failf("revoked %v, local %v, bridge %v", ic.IsRevoked(), ic.Local().IsRevoked(), ic.Bridge().IsRevoked())
	}
	must(ic.Free(), "free")
	if err := ic.Local().Send(ctx, nil, 0, 1); !errors.Is(err, ErrComm) {
		failf("the local communicator of a freed intercommunicator: %v", err)
	}
	// A leader that cannot reach a remote group fails its whole group.
	if _, err := w.IntercommCreate(ctx, 0, w, 0, 6); err == nil {
		failf("IntercommCreate with itself as the remote leader succeeded")
	}
	return local.Free()
}

func TestIntercomm(t *testing.T) {
	for _, way := range []string{"shm", "verbs"} {
		t.Run(way, func(t *testing.T) {
			env := providerEnv(t, way)
			for _, n := range []int{2, 5} {
				t.Run(fmt.Sprint(n), func(t *testing.T) { runOK(t, n, "intercomm", env...) })
			}
		})
	}
}
