//go:build race

package urlquery

// raceEnabled: the race detector changes allocation counts, so budgets are not checked.
const raceEnabled = true
