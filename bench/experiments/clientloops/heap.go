package main

// timerHeap is a binary min-heap of users by their at, each knowing its index (hi), as
// internal/journey/loop.go keeps its users' timers. One loop owns it.
type timerHeap []*user

func (h *timerHeap) push(u *user, at int64) {
	u.at = at
	u.hi = len(*h)
	*h = append(*h, u)
	h.up(u.hi)
}

// head is the earliest user, or nil.
func (h timerHeap) head() *user {
	if len(h) == 0 {
		return nil
	}
	return h[0]
}

func (h *timerHeap) remove(u *user) {
	i, last := u.hi, len(*h)-1
	if i < 0 {
		return
	}
	if i != last {
		h.swap(i, last)
	}
	(*h)[last] = nil
	*h = (*h)[:last]
	u.hi = -1
	if i != last {
		h.down(i)
		h.up(i)
	}
}

func (h timerHeap) swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].hi, h[j].hi = i, j
}

func (h timerHeap) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if h[p].at <= h[i].at {
			return
		}
		h.swap(i, p)
		i = p
	}
}

func (h timerHeap) down(i int) {
	for {
		c := 2*i + 1
		if c >= len(h) {
			return
		}
		if c+1 < len(h) && h[c+1].at < h[c].at {
			c++
		}
		if h[i].at <= h[c].at {
			return
		}
		h.swap(i, c)
		i = c
	}
}
