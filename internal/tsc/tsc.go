// Package tsc reads the x86 time-stamp counter, unfenced, as perftest's
// get_cycles does: one instruction, where a clock read is two vDSO calls.
// Callers convert ticks to time themselves, against a clock they trust.
package tsc
