//go:build linux

package pmi

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

func TestParseMapping(t *testing.T) {
	for _, tc := range []struct {
		in   string
		size int
		want string
	}{
		{"(vector,(0,1,4))", 4, "[0 0 0 0]"},
		{"(vector,(0,2,2))", 4, "[0 0 1 1]"},             // srun -N2 -n4
		{"(vector,(0,2,1))", 3, "[0 1 0]"},               // --distribution=cyclic
		{"(vector,(0,1,2),(1,1,1))", 3, "[0 0 1]"},       // srun -N2 -n3
		{"(vector, (0,3,1), (3,1,2))", 5, "[0 1 2 3 3]"}, // spaces are fine
		{"(vector,(0,16777216,16777216))", 2, "[0 0]"},   // large, and cut short
		{"(vector,(2,1,1))", 2, "[2 2]"},                 // nodes need not start at 0
	} {
		got, err := ParseMapping(tc.in, tc.size)
		if err != nil || fmt.Sprint(got) != tc.want {
			t.Errorf("ParseMapping(%q, %d) = %v, %v; want %s", tc.in, tc.size, got, err, tc.want)
		}
	}
	for _, bad := range []string{"", "vector", "(vector)", "(vector,(0,1))", "(vector,(0,1,2,3))",
		"(vector,(0,0,1))", "(vector,(0,1,0))", "(vector,(-1,1,1))", "(vector,(0,1,x))", "(vector,(0,1,1)",
		"(vector,(0,1,1)),", "(vector,(0,1,99999999))", "(hector,(0,1,1))"} {
		if _, err := ParseMapping(bad, 4); err == nil || !strings.Contains(err.Error(), "PMI_process_mapping") {
			t.Errorf("ParseMapping(%q) = %v, want an error naming the attribute", bad, err)
		}
	}
	if _, err := ParseMapping("(vector,(0,1,1))", 0); err == nil {
		t.Error("a mapping of 0 ranks")
	}
}

// TestJobAttr reads the mapping as PMI-2's job attribute and as PMI-1's
// key, and finds no attribute a server does not have.
func TestJobAttr(t *testing.T) {
	for _, v1 := range []bool{false, true} {
		for _, mapping := range []string{"(vector,(0,2,1))", ""} {
			srv := NewServer(2, "job")
			srv.Mapping, srv.V1Only = mapping, v1
			t.Setenv("PMI_SIZE", "2")
			errs := job(t, srv, func(c *Client) error {
				ctx := context.Background()
				v, err := c.JobAttr(ctx, MappingKey)
				switch {
				case mapping == "" && !errors.Is(err, ErrNotFound):
					return fmt.Errorf("no mapping: %q, %v", v, err)
				case mapping != "" && (err != nil || v != mapping):
					return fmt.Errorf("mapping: %q, %v", v, err)
				}
				if _, err := c.JobAttr(ctx, "nonesuch"); !errors.Is(err, ErrNotFound) {
					return fmt.Errorf("nonesuch: %v", err)
				}
				return c.Finalize(ctx)
			})
			for r, err := range errs {
				if err != nil {
					t.Errorf("v1=%v mapping %q, rank %d: %v", v1, mapping, r, err)
				}
			}
		}
	}
}

// TestServerGone: a launcher whose PMI server dies while a rank waits in a
// fence gives that rank an error saying so, at once.
func TestServerGone(t *testing.T) {
	srv := NewServer(2, "job")
	cl, sv := socketpair(t)
	go srv.Serve(context.Background(), 0, sv)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := NewClient(ctx, cl, 0, "", "")
	if err != nil {
		t.Fatal(err)
	}
	time.AfterFunc(100*time.Millisecond, func() { sv.Close() })
	start := time.Now()
	err = c.Fence(ctx)
	if err == nil || !strings.Contains(err.Error(), "the launcher closed the connection") || ctx.Err() != nil {
		t.Errorf("fence with the server gone: %v after %v", err, time.Since(start))
	}
}
