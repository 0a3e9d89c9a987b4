package wordcount

import "testing"

func TestCountSimple(t *testing.T) {
	if got := Count("one two three"); got != 3 {
		t.Fatalf("Count = %d, want 3", got)
	}
}

func TestLongest(t *testing.T) {
	if got := Longest("a abc ab"); got != "abc" {
		t.Fatalf("Longest = %q", got)
	}
}
