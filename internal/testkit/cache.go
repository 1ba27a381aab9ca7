package testkit

import "container/list"

// prefixCache is one replica's KV prefix cache: an LRU set of chained block hashes, the
// way vLLM's automatic prefix caching keys blocks. A prompt hits on its longest run of
// leading blocks present in the cache.
//
// Blocks are touched deepest first, so within a prompt the first block is the most
// recently used: eviction takes the tails of cold prompts before the shared roots that
// keep every descendant reachable.
type prefixCache struct {
	capacity int // in blocks; 0 disables the cache
	lru      *list.List
	index    map[uint64]*list.Element
}

func newPrefixCache(capacityBlocks int) *prefixCache {
	return &prefixCache{capacity: capacityBlocks, lru: list.New(), index: map[uint64]*list.Element{}}
}

// lookup returns how many leading blocks of the prompt are cached, and touches them.
func (c *prefixCache) lookup(blocks []uint64) int {
	n := 0
	for n < len(blocks) {
		if _, ok := c.index[blocks[n]]; !ok {
			break
		}
		n++
	}
	for i := n - 1; i >= 0; i-- {
		c.lru.MoveToFront(c.index[blocks[i]])
	}
	return n
}

// insert caches every block of the prompt, evicting the least recently used blocks
// beyond capacity.
func (c *prefixCache) insert(blocks []uint64) {
	if c.capacity <= 0 {
		return
	}
	for i := len(blocks) - 1; i >= 0; i-- {
		if e, ok := c.index[blocks[i]]; ok {
			c.lru.MoveToFront(e)
		} else {
			c.index[blocks[i]] = c.lru.PushFront(blocks[i])
		}
	}
	for c.lru.Len() > c.capacity {
		e := c.lru.Back()
		c.lru.Remove(e)
		delete(c.index, e.Value.(uint64))
	}
}

// len returns the number of cached blocks.
func (c *prefixCache) len() int { return c.lru.Len() }
