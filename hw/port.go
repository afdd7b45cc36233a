//go:build linux

package hw

import (
	"fmt"
	"strconv"
	"strings"
)

// PortState is a port's logical state (enum ib_port_state).
type PortState uint8

// Port states, numbered as the kernel numbers them.
const (
	PortNop         PortState = 0
	PortDown        PortState = 1
	PortInit        PortState = 2
	PortArmed       PortState = 3
	PortActive      PortState = 4
	PortActiveDefer PortState = 5
)

var portStateNames = [...]string{"NOP", "DOWN", "INIT", "ARMED", "ACTIVE", "ACTIVE_DEFER"}

// String returns the name ibv_devinfo prints, e.g. "PORT_ACTIVE" without the
// prefix: "ACTIVE".
func (s PortState) String() string {
	if int(s) < len(portStateNames) {
		return portStateNames[s]
	}
	return fmt.Sprintf("PortState(%d)", uint8(s))
}

// MarshalText makes PortState print by name in JSON.
func (s PortState) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// PhysState is a port's physical state (IB spec PortPhysicalState).
type PhysState uint8

// Physical port states.
const (
	PhysSleep          PhysState = 1
	PhysPolling        PhysState = 2
	PhysDisabled       PhysState = 3
	PhysTraining       PhysState = 4
	PhysLinkUp         PhysState = 5
	PhysLinkErrRecover PhysState = 6
	PhysTest           PhysState = 7
)

var physStateNames = [...]string{"", "SLEEP", "POLLING", "DISABLED", "PORT_CONFIGURATION_TRAINING", "LINK_UP", "LINK_ERROR_RECOVERY", "PHY_TEST"}

// String returns the name ibv_devinfo prints.
func (s PhysState) String() string {
	if s > 0 && int(s) < len(physStateNames) {
		return physStateNames[s]
	}
	return fmt.Sprintf("PhysState(%d)", uint8(s))
}

// MarshalText makes PhysState print by name in JSON.
func (s PhysState) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// MTU is an IB path MTU (enum ib_mtu): 1=256 … 5=4096 bytes.
type MTU uint8

// Bytes returns the MTU in bytes, or 0 for an unknown value.
func (m MTU) Bytes() int {
	if m >= 1 && m <= 5 {
		return 128 << m
	}
	return 0
}

// String returns the size in bytes, as ibv_devinfo prints it.
func (m MTU) String() string {
	if b := m.Bytes(); b != 0 {
		return strconv.Itoa(b)
	}
	return fmt.Sprintf("MTU(%d)", uint8(m))
}

// MarshalText makes MTU print as its size in JSON.
func (m MTU) MarshalText() ([]byte, error) { return []byte(m.String()), nil }

// parseEnumAttr parses a sysfs attribute of the form "4: ACTIVE".
func parseEnumAttr(s string) (uint8, error) {
	num, _, _ := strings.Cut(strings.TrimSpace(s), ":")
	n, err := strconv.ParseUint(strings.TrimSpace(num), 10, 8)
	if err != nil {
		return 0, fmt.Errorf("unexpected sysfs value %q", s)
	}
	return uint8(n), nil
}
