//go:build linux

package files

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// Mode is a file's access mode (MPI_MODE_*): exactly one of ModeRdOnly,
// ModeWrOnly and ModeRdWr, and any of the others but as Open says.
type Mode uint32

const (
	ModeRdOnly        Mode = 1 << iota // read only (MPI_MODE_RDONLY)
	ModeWrOnly                         // write only (MPI_MODE_WRONLY)
	ModeRdWr                           // reading and writing (MPI_MODE_RDWR)
	ModeCreate                         // create the file if it does not exist (MPI_MODE_CREATE)
	ModeExcl                           // with ModeCreate: fail if it exists (MPI_MODE_EXCL)
	ModeDeleteOnClose                  // delete the file when it is closed (MPI_MODE_DELETE_ON_CLOSE)
	ModeAppend                         // start the file pointers at the end of the file (MPI_MODE_APPEND)
	modeEnd
)

var modeNames = []string{"RDONLY", "WRONLY", "RDWR", "CREATE", "EXCL", "DELETE_ON_CLOSE", "APPEND"}

func (m Mode) String() string {
	var s []string
	for i, n := range modeNames {
		if m&(1<<i) != 0 {
			s = append(s, n)
		}
	}
	if rest := m &^ (modeEnd - 1); rest != 0 {
		s = append(s, "0x"+strconv.FormatUint(uint64(rest), 16))
	}
	if len(s) == 0 {
		return "0"
	}
	return strings.Join(s, "|")
}

// check says why m is not a valid access mode (MPI 4.1 §14.2.1), or nil.
func (m Mode) check() error {
	access := 0
	for _, a := range []Mode{ModeRdOnly, ModeWrOnly, ModeRdWr} {
		if m&a != 0 {
			access++
		}
	}
	switch {
	case m&^(modeEnd-1) != 0:
		return fmt.Errorf("%w: unknown bits in %v", ErrAMode, m)
	case access != 1:
		return fmt.Errorf("%w: %v: exactly one of RDONLY, WRONLY and RDWR", ErrAMode, m)
	case m&ModeRdOnly != 0 && m&(ModeCreate|ModeExcl) != 0:
		return fmt.Errorf("%w: %v: CREATE and EXCL need write access", ErrAMode, m)
	case m&ModeExcl != 0 && m&ModeCreate == 0:
		return fmt.Errorf("%w: %v: EXCL without CREATE", ErrAMode, m)
	}
	return nil
}

// flags are the open(2) flags of m; create for the process that
// creates the file, the others open it once it exists.
func (m Mode) flags(create bool) int {
	var f int
	switch {
	case m&ModeRdOnly != 0:
		f = os.O_RDONLY
	case m&ModeWrOnly != 0:
		f = os.O_WRONLY
	default:
		f = os.O_RDWR
	}
	if create && m&ModeCreate != 0 {
		f |= os.O_CREATE
		if m&ModeExcl != 0 {
			f |= os.O_EXCL
		}
	}
	return f
}

func (m Mode) canRead() bool  { return m&ModeWrOnly == 0 }
func (m Mode) canWrite() bool { return m&ModeRdOnly == 0 }
