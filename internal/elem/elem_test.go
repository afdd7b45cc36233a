package elem

import "testing"

func TestPlain(t *testing.T) {
	type pair struct {
		A int32
		B [2]float64
	}
	type withPtr struct {
		A int
		P *int
	}
	type withString struct{ S [1]string }
	for _, c := range []struct {
		got, want bool
		name      string
	}{
		{Plain[int64](), true, "int64"},
		{Plain[complex128](), true, "complex128"},
		{Plain[pair](), true, "struct of numbers"},
		{Plain[pair](), true, "struct of numbers, cached"},
		{Plain[withPtr](), false, "struct with a pointer"},
		{Plain[withString](), false, "array of strings"},
		{Plain[[]byte](), false, "slice"},
	} {
		if c.got != c.want {
			t.Errorf("%s: Plain %v", c.name, c.got)
		}
	}
	if b := Bytes([]int32{1, 2}); len(b) != 8 || b[4] != 2 {
		t.Errorf("Bytes: % x", b)
	}
	if b := Bytes([]int64(nil)); b == nil || len(b) != 0 {
		t.Error("Bytes of nothing is empty, not nil")
	}
	if Size[[3]uint16]() != 6 {
		t.Error("Size")
	}
}
