//go:build race

package heavy

// raceEnabled: the race detector changes allocation counts, so budgets are not checked.
const raceEnabled = true
