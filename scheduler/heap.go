package scheduler

// indexHeap is a binary min-heap that tells each element its position, so an element
// can be removed or re-sorted in O(log n) without a search. Every queue of the decision
// core is one of these; none is ever scanned.
type indexHeap[T any] struct {
	s      []T
	less   func(a, b T) bool
	setIdx func(x T, i int) // i is -1 once x has left the heap
}

func (h *indexHeap[T]) Len() int { return len(h.s) }

// Peek returns the least element; the heap must not be empty.
func (h *indexHeap[T]) Peek() T { return h.s[0] }

func (h *indexHeap[T]) Push(x T) {
	h.s = append(h.s, x)
	i := len(h.s) - 1
	h.setIdx(x, i)
	h.up(i)
}

// Pop removes and returns the least element; the heap must not be empty.
func (h *indexHeap[T]) Pop() T { return h.Remove(0) }

// Remove removes the element at position i.
func (h *indexHeap[T]) Remove(i int) T {
	n := len(h.s) - 1
	x := h.s[i]
	if i != n {
		h.swap(i, n)
	}
	var zero T
	h.s[n] = zero
	h.s = h.s[:n]
	if i != n {
		if !h.down(i) {
			h.up(i)
		}
	}
	h.setIdx(x, -1)
	return x
}

// Fix restores the order after the element at position i changed its key.
func (h *indexHeap[T]) Fix(i int) {
	if !h.down(i) {
		h.up(i)
	}
}

func (h *indexHeap[T]) swap(i, j int) {
	h.s[i], h.s[j] = h.s[j], h.s[i]
	h.setIdx(h.s[i], i)
	h.setIdx(h.s[j], j)
}

func (h *indexHeap[T]) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !h.less(h.s[i], h.s[p]) {
			return
		}
		h.swap(i, p)
		i = p
	}
}

// down sifts the element at i towards the leaves and reports whether it moved.
func (h *indexHeap[T]) down(i0 int) bool {
	i, n := i0, len(h.s)
	for {
		l := 2*i + 1
		if l >= n {
			break
		}
		j := l
		if r := l + 1; r < n && h.less(h.s[r], h.s[l]) {
			j = r
		}
		if !h.less(h.s[j], h.s[i]) {
			break
		}
		h.swap(i, j)
		i = j
	}
	return i > i0
}
