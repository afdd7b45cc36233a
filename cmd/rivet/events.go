//go:build linux

package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/rivet-hpc/rivet/hw"
)

// testHookWatching runs once the watch has subscribed: no event after it
// is missed.
var testHookWatching = func() {}

func eventsCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("rivet events", flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "print one JSON object per event")
	if err := parseFlags(fs, args, stderr); err != nil {
		return err
	}
	events, err := hw.Watch(ctx)
	if err != nil {
		return err
	}
	testHookWatching()
	enc := json.NewEncoder(stdout)
	for e := range events {
		if e.Kind == hw.EventError {
			return e.Err
		}
		if *asJSON {
			enc.Encode(struct {
				Kind string
				hw.Event
			}{e.Kind.String(), e})
			continue
		}
		fmt.Fprintf(stdout, "%s %s\n", e.Time.Format(time.RFC3339Nano), e)
	}
	return nil
}
