package main

import (
	"fmt"
	"slices"
)

// median is the median of xs (the mean of the middle two for an even count); 0 for none.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 0 {
		return (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return s[len(s)/2]
}

// stat is "median (min–max)" of xs, each formatted with f.
func stat(xs []float64, f string) string {
	if len(xs) == 0 {
		return "-"
	}
	return fmt.Sprintf(f+" ("+f+"–"+f+")", median(xs), slices.Min(xs), slices.Max(xs))
}
