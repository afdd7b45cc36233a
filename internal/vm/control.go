//go:build linux

package vm

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// controlTTY is node 1's serial port to the runner's control.
const controlTTY = "/dev/ttyS3"

// ErrNoControl is returned by Control outside node 1 of a cluster.
var ErrNoControl = errors.New("vm: no cluster control here (only node 1 of an rxevm cluster has one)")

var controlMu sync.Mutex

// Control asks the runner of this cluster for a fault, from node 1's
// guest. Commands: "kill N" (SIGKILL node N's qemu: the node dies with
// no word to anyone), "stop N" and "cont N" (SIGSTOP and SIGCONT: a hung
// node), "link N down" and "link N up" (its NIC's carrier, through QMP),
// "partition 1,2 3" (the switch forwards only within each side) and
// "heal". Node 1 cannot be faulted: its command is the run.
func Control(ctx context.Context, command string) error {
	path := os.Getenv("RXEVM_CONTROL")
	if path == "" {
		return ErrNoControl
	}
	controlMu.Lock()
	defer controlMu.Unlock()
	f, err := os.OpenFile(path, os.O_RDWR|unix.O_NOCTTY|unix.O_NONBLOCK, 0)
	if err != nil {
		return fmt.Errorf("vm: control: %w", err)
	}
	defer f.Close()
	if err := makeRaw(f); err != nil {
		return fmt.Errorf("vm: control: %w", err)
	}
	stop := context.AfterFunc(ctx, func() { f.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	if _, err := f.WriteString(strings.TrimSpace(command) + "\n"); err != nil {
		return fmt.Errorf("vm: control %q: %w", command, err)
	}
	answer, err := bufio.NewReader(f).ReadString('\n')
	if err != nil {
		if ctx.Err() != nil {
			err = ctx.Err()
		}
		return fmt.Errorf("vm: control %q: %w", command, err)
	}
	answer = strings.TrimSpace(answer)
	if answer != "ok" {
		return fmt.Errorf("vm: control %q: %s", command, strings.TrimPrefix(answer, "error: "))
	}
	return nil
}

// makeRaw turns off the tty's line discipline: bytes pass unchanged.
func makeRaw(f *os.File) error {
	t, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	if err != nil {
		return err
	}
	t.Iflag &^= unix.IGNBRK | unix.BRKINT | unix.PARMRK | unix.ISTRIP | unix.INLCR | unix.IGNCR | unix.ICRNL | unix.IXON
	t.Oflag &^= unix.OPOST
	t.Lflag &^= unix.ECHO | unix.ECHONL | unix.ICANON | unix.ISIG | unix.IEXTEN
	t.Cflag &^= unix.CSIZE | unix.PARENB
	t.Cflag |= unix.CS8
	t.Cc[unix.VMIN], t.Cc[unix.VTIME] = 1, 0
	return unix.IoctlSetTermios(int(f.Fd()), unix.TCSETS, t)
}
