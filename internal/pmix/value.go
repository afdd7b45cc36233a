package pmix

import (
	"fmt"
	"strconv"
)

// DataType is PMIx's pmix_data_type_t: what a value holds.
type DataType uint16

// The data types of PMIx v4 (pmix_common.h); each packs as described in
// the package doc.
const (
	Undef             DataType = 0
	Bool              DataType = 1
	Byte              DataType = 2
	String            DataType = 3
	Size              DataType = 4
	PID               DataType = 5
	Int               DataType = 6
	Int8              DataType = 7
	Int16             DataType = 8
	Int32             DataType = 9
	Int64             DataType = 10
	Uint              DataType = 11
	Uint8             DataType = 12
	Uint16            DataType = 13
	Uint32            DataType = 14
	Uint64            DataType = 15
	Float             DataType = 16
	Double            DataType = 17
	Timeval           DataType = 18
	Time              DataType = 19
	Status            DataType = 20
	ValueType         DataType = 21
	ProcType          DataType = 22
	AppType           DataType = 23
	InfoType          DataType = 24
	Pdata             DataType = 25
	Buffer            DataType = 26
	ByteObject        DataType = 27
	Kval              DataType = 28
	Persist           DataType = 30
	Pointer           DataType = 31
	Scope             DataType = 32
	DataRange         DataType = 33
	Command           DataType = 34
	InfoDirectives    DataType = 35
	DataTypeType      DataType = 36
	ProcState         DataType = 37
	ProcInfo          DataType = 38
	DataArray         DataType = 39
	ProcRank          DataType = 40
	Query             DataType = 41
	CompressedString  DataType = 42
	AllocDirective    DataType = 43
	IOFChannel        DataType = 45
	Envar             DataType = 46
	Coord             DataType = 47
	Regattr           DataType = 48
	Regex             DataType = 49
	JobState          DataType = 50
	LinkState         DataType = 51
	ProcCPUSet        DataType = 52
	Geometry          DataType = 53
	DeviceDist        DataType = 54
	Endpoint          DataType = 55
	Topo              DataType = 56
	DevType           DataType = 57
	LocType           DataType = 58
	CompressedByteObj DataType = 59
)

// Proc names a process: its job's namespace and its rank in the job.
type Proc struct {
	Nspace string
	Rank   uint32
}

// Special ranks (pmix_common.h).
const (
	RankUndef    uint32 = 1<<32 - 1 // no rank: job-level data
	RankWildcard uint32 = 1<<32 - 2 // every rank of a job
)

// Value is a typed PMIx value. V holds, by Type: bool (Bool); uint8 (the
// one-byte types: Byte, Int8, Uint8, Scope, Command, the states…); int64
// (the signed integers, Status); uint64 (the unsigned integers, Size,
// PID, ProcRank, DataType…); float64 (Float, Double); string (String,
// Regex, ProcCPUSet); []byte (ByteObject, Buffer, the compressed types);
// Proc; []Info (a DataArray of Info); []Value (any other DataArray);
// [2]int64 (Timeval: seconds, microseconds); and a value of its own type
// for the rest.
type Value struct {
	Type DataType
	V    any
}

// Info is a key and a value, with the directive flags PMIx attaches.
type Info struct {
	Key   string
	Flags uint32
	Value Value
}

// Uint returns v as an unsigned integer, if it holds one.
func (v Value) Uint() (uint64, bool) {
	switch x := v.V.(type) {
	case uint64:
		return x, true
	case uint8:
		return uint64(x), true
	case int64:
		return uint64(x), x >= 0
	}
	return 0, false
}

// Str returns v as a string, if it holds one.
func (v Value) Str() (string, bool) {
	s, ok := v.V.(string)
	return s, ok
}

// EnvarValue is a Envar value: an environment variable to set, and the
// separator to prepend or append it with.
type EnvarValue struct {
	Name, Value string
	Separator   byte
}

// ProcInfoValue is a ProcInfo value.
type ProcInfoValue struct {
	Proc             Proc
	Host, Executable string
	PID              uint64
	State            uint8
}

// CoordValue is a Coord value: a position in a fabric, in a view.
type CoordValue struct {
	View   uint8
	Coords []uint32
}

// GeometryValue is a Geometry value.
type GeometryValue struct {
	Fabric       uint64
	UUID, OSName string
	Coords       []CoordValue
}

// DeviceDistValue is a DeviceDist value.
type DeviceDistValue struct {
	UUID, OSName     string
	Type             uint64
	MinDist, MaxDist uint64
}

// EndpointValue is an Endpoint value.
type EndpointValue struct {
	UUID, OSName string
	Addr         []byte
}

// RegattrValue is a Regattr value: a registered attribute.
type RegattrValue struct {
	Name, Key   string
	Type        uint16
	Description []string
}

// PdataValue is a Pdata value: a published key of a process.
type PdataValue struct {
	Proc  Proc
	Key   string
	Value Value
}

// value reads the value of type t (without its type tag).
func (d *decoder) value(t DataType) Value {
	v := Value{Type: t}
	switch t {
	case Undef:
	case Bool:
		v.V = d.u8() != 0
	case Byte, Int8, Uint8, Persist, Pointer, Scope, DataRange, Command, ProcState, AllocDirective, JobState, LinkState:
		v.V = d.u8()
	case Int16, Int32, Int64, Int, Status:
		v.V = d.varint()
	case Uint:
		// openpmix packs an unsigned int as a signed one of its size.
		v.V = uint64(uint32(d.int32()))
	case Size, Uint16, Uint32, Uint64, Time, ProcRank, InfoDirectives, DataTypeType, IOFChannel, LocType, DevType:
		v.V = d.uvarint()
	case PID:
		v.V = d.system()
	case Float, Double:
		s := d.str()
		f, err := strconv.ParseFloat(s, 64)
		if err != nil && d.err == nil {
			d.fail("a %d value %q", t, s)
		}
		v.V = f
	case Timeval:
		v.V = [2]int64{d.varint(), d.varint()}
	case String, ProcCPUSet:
		v.V = d.str()
	case Regex:
		v.V = d.regex()
	case ByteObject, CompressedString, CompressedByteObj:
		v.V = d.bytes()
	case Buffer:
		d.u8() // the buffer's own type
		v.V = d.bytes()
	case ProcType:
		v.V = d.proc()
	case ValueType:
		v.V = d.value(DataType(d.dataType()))
	case InfoType:
		v.V = d.info()
	case Kval:
		k := d.str()
		v.V = Info{Key: k, Value: d.value(DataType(d.dataType()))}
	case Pdata:
		p := d.proc()
		k := d.str()
		v.V = PdataValue{Proc: p, Key: k, Value: d.value(DataType(d.dataType()))}
	case ProcInfo:
		var pi ProcInfoValue
		pi.Proc = d.proc()
		pi.Host = d.str()
		pi.Executable = d.str()
		pi.PID = d.system()
		pi.State = d.u8()
		v.V = pi
	case DataArray:
		v.V = d.array()
	case Envar:
		v.V = EnvarValue{Name: d.str(), Value: d.str(), Separator: d.u8()}
	case Coord:
		v.V = d.coord()
	case Geometry:
		var g GeometryValue
		g.Fabric = d.uvarint()
		g.UUID = d.str()
		g.OSName = d.str()
		n := d.elems()
		for i := 0; i < n && d.err == nil; i++ {
			g.Coords = append(g.Coords, d.coord())
		}
		v.V = g
	case DeviceDist:
		v.V = DeviceDistValue{UUID: d.str(), OSName: d.str(), Type: d.uvarint(), MinDist: d.uvarint(), MaxDist: d.uvarint()}
	case Endpoint:
		v.V = EndpointValue{UUID: d.str(), OSName: d.str(), Addr: d.bytes()}
	case Regattr:
		var r RegattrValue
		r.Name = d.str()
		r.Key = d.str()
		r.Type = d.dataType()
		n := d.int32()
		if d.err == nil && (n < 0 || n > maxCount) {
			d.fail("%d descriptions", n)
		}
		for i := int32(0); i < n && d.err == nil; i++ {
			r.Description = append(r.Description, d.str())
		}
		v.V = r
	default:
		// AppType, Query and Topo carry what a Rivet process never asks for
		// (Topo's packing even depends on the server's hwloc version).
		d.fail("a value of data type %d, which this client does not decode", t)
	}
	return v
}

// system reads a value of a system type (a pid_t): openpmix tags it with
// the fixed-size unsigned type it packs as.
func (d *decoder) system() uint64 {
	switch t := DataType(d.dataType()); t {
	case Uint8:
		return uint64(d.u8())
	case Uint16, Uint32, Uint64:
		return d.uvarint()
	default:
		d.fail("a system integer packed as data type %d", t)
		return 0
	}
}

func (d *decoder) info() Info {
	var in Info
	in.Key = d.str()
	in.Flags = d.uint32()
	in.Value = d.value(DataType(d.dataType()))
	return in
}

func (d *decoder) coord() CoordValue {
	c := CoordValue{View: d.u8()}
	n := d.elems()
	for i := 0; i < n && d.err == nil; i++ {
		c.Coords = append(c.Coords, d.uint32())
	}
	return c
}

// array reads a DataArray: []Info for an array of Info, []Value otherwise.
func (d *decoder) array() any {
	t := DataType(d.dataType())
	n := d.elems()
	if d.err != nil || n == 0 || t == Undef {
		return []Value(nil)
	}
	if t == InfoType {
		infos := make([]Info, 0, min(n, 64))
		for i := 0; i < n && d.err == nil; i++ {
			infos = append(infos, d.info())
		}
		return infos
	}
	vals := make([]Value, 0, min(n, 64))
	for i := 0; i < n && d.err == nil; i++ {
		vals = append(vals, d.value(t))
	}
	return vals
}

// regex reads a Regex value. openpmix hands it to the first of its regex
// components that recognizes it: "pmix" and "raw:" regexes are bare
// NUL-terminated strings, zlib-compressed ones are "blob\0component=zlib:\0"
// then the uncompressed size, ':', and the compressed bytes; anything else
// is packed as a counted string.
func (d *decoder) regex() string {
	if d.err != nil {
		return ""
	}
	b := d.b
	switch {
	case hasPrefix(b, "pmix") || hasPrefix(b, "raw:"):
		i := indexNUL(b)
		if i < 0 {
			d.fail("regex without its terminating NUL")
			return ""
		}
		d.b = b[i+1:]
		return string(b[:i])
	case hasPrefix(b, "blob"):
		d.fail("a zlib-compressed regex, which this client does not decode")
		return ""
	}
	var s string
	d.one("regex", func() { s = d.str() })
	return s
}

func hasPrefix(b []byte, p string) bool { return len(b) >= len(p) && string(b[:len(p)]) == p }

func indexNUL(b []byte) int {
	for i, c := range b {
		if c == 0 {
			return i
		}
	}
	return -1
}

// kval reads a top-level packed key and value (PMIX_KVAL).
func (d *decoder) kval() Info {
	var kv Info
	d.one("key-value", func() {
		kv.Key = d.str()
		kv.Value = d.value(DataType(d.dataType()))
	})
	return kv
}

// value packs v with its type tag: the types Rivet puts and asks with.
func (e *encoder) value(v Value) error {
	e.dataType(uint16(v.Type))
	switch x := v.V.(type) {
	case bool:
		if v.Type != Bool {
			break
		}
		b := uint8(0)
		if x {
			b = 1
		}
		e.u8(b)
		return nil
	case []byte:
		if v.Type != ByteObject {
			break
		}
		e.bytes(x)
		return nil
	case string:
		if v.Type != String {
			break
		}
		e.str(x)
		return nil
	case int64:
		if v.Type != Int && v.Type != Int32 && v.Type != Int64 {
			break
		}
		e.varint(x)
		return nil
	case uint64:
		if v.Type != Uint32 && v.Type != Uint64 && v.Type != Size {
			break
		}
		e.uvarint(x)
		return nil
	}
	return fmt.Errorf("pmix: cannot pack %T as data type %d", v.V, v.Type)
}

func (e *encoder) info(in Info) error {
	e.str(in.Key)
	e.uvarint(uint64(in.Flags))
	return e.value(in.Value)
}
