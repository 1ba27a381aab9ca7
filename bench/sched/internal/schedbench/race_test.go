//go:build race

package schedbench

// raceEnabled: the race detector slows every memory access several times over, so a wall
// time measured under it is the detector's, not the decision core's.
const raceEnabled = true
