package fabric

// oneSidedCounts tracks one peer's one-sided operations: how many were
// issued and how many completed, and the first failure.
type oneSidedCounts struct {
	issued, done uint64
	err          error
}

func (c *oneSidedCounts) fail(err error) {
	c.done++
	if c.err == nil {
		c.err = err
	}
}
