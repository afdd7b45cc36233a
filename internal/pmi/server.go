//go:build linux

package pmi

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
)

// Server is a PMI server for one job of Size processes, as a launcher runs
// it: rivetrun serves each process's connection with Serve. It speaks PMI-2
// and PMI-1, with one key-value space; puts become visible at the fence,
// which completes when every rank has entered it. If a rank's connection
// ends before it finalized, ranks waiting in a fence get an error naming
// it rather than waiting forever.
type Server struct {
	Size  int
	JobID string
	// Mapping is the value of PMI_process_mapping, e.g. "(vector,(0,1,4))"
	// for 4 ranks on one node; empty if the server does not know where its
	// ranks run.
	Mapping string
	// V1Only makes the server answer as a PMI-1-only launcher does.
	V1Only bool
	// Spawn, if set, serves PMI-2 spawn requests.
	Spawn Spawner
	// SpawnerJobID is the id of the job that spawned this one, given to
	// its ranks at fullinit; empty for a launched job.
	SpawnerJobID string
	// Universe is the universe size the ranks are told (0: not told).
	Universe int
	// Lookups, if set, counts the gets the server answers (a launcher's
	// work that should grow with the ranks, not with their square).
	Lookups *atomic.Int64

	mu        sync.Mutex
	kvs       map[string]string
	pending   map[string]string // puts since the last fence
	arrived   int
	cur       *fenceGen // the fence ranks are entering now
	failed    error     // set once a rank is lost; fences fail from then on
	finalized map[int]bool
}

// fenceGen is one fence: done closes when it completes, or fails with err.
type fenceGen struct {
	done chan struct{}
	err  error
}

// NewServer makes a server for a job of size ranks on one node.
func NewServer(size int, jobid string) *Server {
	return &Server{Size: size, JobID: jobid, Mapping: fmt.Sprintf("(vector,(0,1,%d))", size),
		kvs: map[string]string{}, pending: map[string]string{}, cur: &fenceGen{done: make(chan struct{})},
		finalized: map[int]bool{}}
}

// Serve handles one process's connection until it finalizes, aborts or
// disconnects. rank is the rank the launcher assigned to that process. It
// returns nil after a finalize, ErrAborted after an abort, and otherwise
// why the connection ended.
func (s *Server) Serve(ctx context.Context, rank int, conn io.ReadWriter) error {
	err := s.serve(ctx, rank, conn)
	s.mu.Lock()
	if !s.finalized[rank] && !errors.Is(err, ErrAborted) && s.failed == nil {
		s.failed = fmt.Errorf("rank %d exited without finalizing", rank)
		s.cur.err = s.failed
		close(s.cur.done) // wake every fence waiter
	}
	s.mu.Unlock()
	return err
}

// ErrAborted is returned by Serve when the process called abort.
var ErrAborted = errors.New("pmi: the process aborted the job")

func (s *Server) serve(ctx context.Context, rank int, conn io.ReadWriter) error {
	r := bufio.NewReader(conn)
	init, err := readV1(r)
	if err != nil {
		return err
	}
	if init.cmd != "init" {
		return fmt.Errorf("%w: first message %q is not init", ErrProtocol, init.cmd)
	}
	v2 := false
	if v, _ := init.get("pmi_version"); v == "2" && !s.V1Only {
		v2 = true
	}
	version := "1"
	if v2 {
		version = "2"
	}
	reply := msg{"response_to_init", []kv{{"pmi_version", version}, {"pmi_subversion", "0"}, {"rc", "0"}}}
	if err := writeV1(conn, reply); err != nil {
		return err
	}
	read, write := readV1, writeV1
	if v2 {
		read, write = readV2, writeV2
	}
	for {
		req, err := read(r)
		if err != nil {
			return err
		}
		resp, done, err := s.handle(ctx, rank, v2, req)
		if err != nil {
			return err
		}
		if !v2 {
			for i := range resp.attrs { // PMI-1 values cannot hold spaces
				resp.attrs[i].v = strings.ReplaceAll(resp.attrs[i].v, " ", "_")
			}
		}
		if resp.cmd != "" {
			if err := write(conn, resp); err != nil {
				return err
			}
		}
		if done {
			return nil
		}
	}
}

func ok(cmd string, attrs ...kv) msg { return msg{cmd, append([]kv{{"rc", "0"}}, attrs...)} }

func fail(cmd, text string) msg {
	return msg{cmd, []kv{{"rc", "1"}, {"errmsg", text}, {"msg", text}}}
}

// handle answers one request; done means the connection is finished.
func (s *Server) handle(ctx context.Context, rank int, v2 bool, m msg) (msg, bool, error) {
	switch m.cmd {
	// PMI-2
	case "fullinit":
		resp := ok("fullinit-response", kv{"pmi-version", "2"}, kv{"pmi-subversion", "0"},
			kv{"rank", strconv.Itoa(rank)}, kv{"size", strconv.Itoa(s.Size)}, kv{"appnum", "0"},
			kv{"debugged", "FALSE"}, kv{"pmiverbose", "FALSE"})
		if s.SpawnerJobID != "" {
			resp.attrs = append(resp.attrs, kv{"spawner-jobid", s.SpawnerJobID})
		}
		return resp, false, nil
	case "spawn":
		return s.spawn(ctx, rank, m), false, nil
	case "job-getid":
		return ok("job-getid-response", kv{"jobid", s.JobID}), false, nil
	case "kvs-put", "put":
		key, _ := m.get("key")
		value, _ := m.get("value")
		s.mu.Lock()
		s.pending[key] = value
		s.mu.Unlock()
		if m.cmd == "put" {
			return ok("put_result"), false, nil
		}
		return ok("kvs-put-response"), false, nil
	case "kvs-fence", "barrier_in":
		resp := "kvs-fence-response"
		if m.cmd == "barrier_in" {
			resp = "barrier_out"
		}
		if err := s.fence(ctx); err != nil {
			return fail(resp, err.Error()), false, nil
		}
		return ok(resp), false, nil
	case "kvs-get", "get":
		if s.Lookups != nil {
			s.Lookups.Add(1)
		}
		key, _ := m.get("key")
		s.mu.Lock()
		v, found := s.kvs[key]
		s.mu.Unlock()
		if key == MappingKey && s.Mapping != "" && m.cmd == "get" {
			// PMI-1 has no job attributes; launchers serve this one as a key.
			v, found = s.Mapping, true
		}
		resp := "kvs-get-response"
		if m.cmd == "get" {
			resp = "get_result"
			if !found {
				return fail(resp, "key not found: "+key), false, nil
			}
			return ok(resp, kv{"value", v}), false, nil
		}
		if !found {
			return ok(resp, kv{"found", "FALSE"}), false, nil
		}
		return ok(resp, kv{"found", "TRUE"}, kv{"value", v}), false, nil
	case "info-getjobattr":
		key, _ := m.get("key")
		if key == MappingKey && s.Mapping != "" {
			return ok("info-getjobattr-response", kv{"found", "TRUE"}, kv{"value", s.Mapping}), false, nil
		}
		if key == UniverseKey && s.Universe > 0 {
			return ok("info-getjobattr-response", kv{"found", "TRUE"}, kv{"value", strconv.Itoa(s.Universe)}), false, nil
		}
		return ok("info-getjobattr-response", kv{"found", "FALSE"}), false, nil
	case "finalize":
		s.mu.Lock()
		s.finalized[rank] = true
		s.mu.Unlock()
		if !v2 {
			return ok("finalize_ack"), true, nil
		}
		return ok("finalize-response"), true, nil
	case "abort":
		return msg{}, true, ErrAborted
	// PMI-1 only
	case "init": // a client that asked for PMI-2 and was offered PMI-1 starts again
		return ok("response_to_init", kv{"pmi_version", "1"}, kv{"pmi_subversion", "1"}), false, nil
	case "get_maxes":
		return ok("maxes", kv{"kvsname_max", "256"}, kv{"keylen_max", strconv.Itoa(MaxKey)},
			kv{"vallen_max", "1024"}), false, nil
	case "get_my_kvsname":
		return ok("my_kvsname", kv{"kvsname", s.JobID}), false, nil
	case "get_universe_size":
		return ok("universe_size", kv{"size", strconv.Itoa(max(s.Size, s.Universe))}), false, nil
	case "get_appnum":
		return ok("appnum", kv{"appnum", "0"}), false, nil
	}
	return fail(m.cmd+"-response", "unknown command "+m.cmd), false, nil
}

// fence waits until every rank has entered the current fence, then
// publishes the puts made before it.
func (s *Server) fence(ctx context.Context) error {
	s.mu.Lock()
	if s.failed != nil {
		s.mu.Unlock()
		return s.failed
	}
	g := s.cur
	s.arrived++
	if s.arrived == s.Size {
		for k, v := range s.pending {
			s.kvs[k] = v
		}
		clear(s.pending)
		s.arrived = 0
		s.cur = &fenceGen{done: make(chan struct{})}
		close(g.done)
		s.mu.Unlock()
		return nil
	}
	s.mu.Unlock()
	select {
	case <-g.done:
		return g.err // written before done closed
	case <-ctx.Done():
		return ctx.Err()
	}
}
