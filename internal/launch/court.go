//go:build linux

package launch

// A court turns the ranks' verdicts ("declared rank=R") into the ranks
// the launcher kills under FT. A rank is condemned once more than half
// of the other ranks still running, and not condemned themselves, have
// declared it failed. One rank's word is not enough: a rank cut off from
// the others — its link down — declares every one of them failed, as
// they declare it; only the side with the majority is believed, and once
// a rank is condemned its own verdicts no longer count. Of two ranks
// that declare each other, the first declared is condemned.
type court struct {
	votes     [][]bool // votes[r][b]: rank b declared rank r failed
	condemned []bool
	exited    []bool
}

func newCourt(n int) *court {
	c := &court{votes: make([][]bool, n), condemned: make([]bool, n), exited: make([]bool, n)}
	for r := range c.votes {
		c.votes[r] = make([]bool, n)
	}
	return c
}

// declare records that rank by declared rank r failed and returns the
// ranks condemned by it.
func (c *court) declare(by, r int) []int {
	if by == r || by < 0 || r < 0 || by >= len(c.votes) || r >= len(c.votes) {
		return nil
	}
	c.votes[r][by] = true
	return c.judge()
}

// exit records that rank r exited, which shrinks the majorities, and
// returns the ranks condemned by it.
func (c *court) exit(r int) []int {
	c.exited[r] = true
	return c.judge()
}

func (c *court) judge() []int {
	var out []int
	for changed := true; changed; {
		changed = false
		for r := range c.votes {
			if c.condemned[r] || c.exited[r] {
				continue
			}
			votes, others := 0, 0
			for b := range c.votes {
				if b == r || c.exited[b] || c.condemned[b] {
					continue
				}
				others++
				if c.votes[r][b] {
					votes++
				}
			}
			if votes > 0 && 2*votes > others {
				c.condemned[r] = true
				out = append(out, r)
				changed = true
				break // the condemned rank's votes no longer count: judge anew
			}
		}
	}
	return out
}

// grow makes room for ranks up to n (spawned processes).
func (c *court) grow(n int) {
	for len(c.votes) < n {
		c.condemned = append(c.condemned, false)
		c.exited = append(c.exited, false)
		c.votes = append(c.votes, nil)
	}
	for r := range c.votes {
		for len(c.votes[r]) < n {
			c.votes[r] = append(c.votes[r], false)
		}
	}
}
