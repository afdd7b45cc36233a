package pmix

// openpmix's "flex128" integer encoding (its psquash component, the
// default since v4): base-128 digits, least significant first, the high
// bit of each byte saying another follows, at most eight such bytes and
// then one whole byte for the last eight bits of a 64-bit value. Signed
// values are folded first: bit 0 holds the sign and the rest the value,
// complemented when negative (−1 is 1, 1 is 2, −2 is 3).

// maxFlex is the longest encoding of a 64-bit value.
const maxFlex = 9

// appendUvarint appends v in flex128.
func appendUvarint(b []byte, v uint64) []byte {
	for i := 0; i < maxFlex-1; i++ {
		d := byte(v & 0x7f)
		v >>= 7
		if v == 0 {
			return append(b, d)
		}
		b = append(b, d|0x80)
	}
	return append(b, byte(v))
}

// appendVarint appends the signed v in flex128.
func appendVarint(b []byte, v int64) []byte {
	u := uint64(v)
	sign := uint64(0)
	if v < 0 {
		u, sign = ^u, 1
	}
	return appendUvarint(b, u<<1|sign)
}

// uvarint decodes a flex128 value from the front of b, returning it and
// the bytes it took, or n == 0 if b ends first.
func uvarint(b []byte) (v uint64, n int) {
	var shift uint
	for i := 0; i < len(b); i++ {
		if i == maxFlex-1 {
			return v | uint64(b[i])<<shift, i + 1
		}
		v |= uint64(b[i]&0x7f) << shift
		if b[i]&0x80 == 0 {
			return v, i + 1
		}
		shift += 7
	}
	return 0, 0
}

// unfold undoes the sign folding of appendVarint.
func unfold(u uint64) int64 {
	if u&1 != 0 {
		return int64(^(u >> 1))
	}
	return int64(u >> 1)
}
