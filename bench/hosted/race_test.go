//go:build race

package main

// raceEnabled: under the race detector the table's modelled traffic runs ~10× slower, so
// TestModelsTable takes one seed per cell there (the race check) and the suite runs the
// whole table again without it (.ci/run).
const raceEnabled = true
