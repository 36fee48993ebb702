//go:build !race

package contentcoding

const raceEnabled = false
