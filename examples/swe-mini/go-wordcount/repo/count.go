// Package wordcount counts words in text.
package wordcount

import "strings"

// Count returns how many words `text` holds; words are separated by whitespace.
func Count(text string) int {
	if text == "" {
		return 0
	}
	return len(strings.Split(text, " "))
}

// Longest returns the longest word, the first of equals.
func Longest(text string) string {
	best := ""
	for _, w := range strings.Fields(text) {
		if len(w) > len(best) {
			best = w
		}
	}
	return best
}
