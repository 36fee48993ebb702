package seed

// The word lists of the reference generator, in its order: a pick is an index into them,
// so order is part of the output.
var (
	adjectives = []string{
		"quiet", "brave", "clever", "sunny", "rusty", "swift", "lazy", "mellow", "sharp", "wild",
		"cosmic", "tiny", "golden", "silver", "happy", "grumpy", "curious", "lucky", "salty", "zesty",
	}
	nouns = []string{
		"otter", "falcon", "badger", "comet", "river", "maple", "pixel", "walrus", "ember", "glacier",
		"lantern", "meadow", "nebula", "orchid", "pebble", "quartz", "raven", "sparrow", "thistle", "willow",
	}
	// words holds "kind of" and "sort of" as four separate words, as the reference does.
	words = []string{
		"the", "a", "an", "and", "but", "or", "so", "because", "while", "after", "before", "just",
		"really", "very", "kind", "of", "sort", "of", "maybe", "probably", "definitely", "server",
		"database", "request", "latency", "cache", "index", "query", "benchmark", "droplet", "cpu",
		"memory", "disk", "network", "throughput", "users", "coffee", "morning", "weekend", "project",
		"deploy", "release", "bug", "feature", "test", "rewrite", "refactor", "commit", "branch",
		"merge", "review", "thinking", "building", "shipping", "learning", "reading", "writing",
		"debugging", "measuring", "watching", "waiting", "running", "walking", "fast", "slow", "small",
		"big", "cheap", "simple", "boring", "clever", "weird", "surprising", "honest", "careful",
		"lucky", "tired", "ready", "done", "broken", "today", "tonight", "tomorrow", "yesterday",
		"again", "finally", "never", "always", "sometimes", "usually", "rarely", "once", "twice", "this",
		"that", "these", "those", "here", "there", "everywhere", "nowhere", "something", "nothing",
		"everything", "anything", "someone", "nginx", "node", "postgres", "typescript", "express",
		"linux", "ubuntu", "systemd", "load", "steal", "swap", "kernel", "socket", "keepalive", "pool",
	}
	openers = []string{
		"Hot take:", "TIL", "Unpopular opinion:", "Note to self:", "PSA:", "Okay so",
		"Update:", "Honestly,", "Reminder:", "Question:",
	}
	endings = []string{".", ".", ".", "!", "?", "..."}
)
