//go:build race

package sqlitec

// raceEnabled: the race detector changes allocation counts, so budgets are not checked.
const raceEnabled = true
