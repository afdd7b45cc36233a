package testutil

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestPinProcess: a pinned process has every thread on the one CPU,
// though the runtime was starting threads while it was pinned, and
// threads started after it inherit that CPU.
func TestPinProcess(t *testing.T) {
	if v := os.Getenv("PIN_TEST_CPU"); v != "" {
		pinChild(t, v)
		return
	}
	cpus, err := CPUs()
	if err != nil {
		t.Fatal(err)
	}
	if len(cpus) < 2 {
		t.Skip("needs 2 CPUs to tell a pinned thread from an unpinned one")
	}
	cpu := cpus[len(cpus)-1]
	for try := 0; try < 5; try++ {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestPinProcess$", "-test.v")
		cmd.Env = append(os.Environ(), "PIN_TEST_CPU="+strconv.Itoa(cpu))
		out, err := cmd.CombinedOutput()
		cancel()
		if err != nil {
			t.Fatalf("the pinned process: %v\n%s", err, out)
		}
		if want := fmt.Sprintf("masks [%d]\n", cpu); !strings.Contains(string(out), want) {
			t.Fatalf("want %q from the pinned process:\n%s", want, out)
		}
	}
}

// pinChild is TestPinProcess's process: it pins itself to cpu while
// threads come and go, starts more, and prints its threads' masks.
func pinChild(t *testing.T, cpu string) {
	c, err := strconv.Atoi(cpu)
	if err != nil {
		t.Fatal(err)
	}
	stop := churnThreads()
	if err := PinProcess(c); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	stop()
	fmt.Printf("masks %v\n", ThreadCPUs())
}

// churnThreads makes the runtime start threads until stop is called: a
// goroutine that ends locked to its thread ends the thread, and the next
// needs a new one.
func churnThreads() (stop func()) {
	done := make(chan struct{})
	for range 4 {
		go func() {
			for {
				select {
				case <-done:
					return
				default:
				}
				ended := make(chan struct{})
				go func() {
					runtime.LockOSThread()
					close(ended)
				}()
				<-ended
			}
		}()
	}
	return func() { close(done) }
}
