//go:build race

package token

// raceEnabled skips allocation budgets: the race detector allocates on its own.
const raceEnabled = true
