// Package layers holds no code: its test keeps the imports between
// Rivet's packages in the layer order docs/architecture.md draws.
package layers
