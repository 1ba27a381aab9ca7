//go:build !race

package schedbench

const raceEnabled = false
