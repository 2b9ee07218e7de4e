package jsonlimit

// Depth returns the deepest nesting of arrays and objects in data, or the
// first depth beyond limit (it stops counting there). Only brackets outside
// strings count; stray closers never lower the count below zero. Whether
// data is valid JSON is the decoder's business.
func Depth(data []byte, limit int) int {
	depth, deepest := 0, 0
	inString, escaped := false, false
	for _, c := range data {
		switch {
		case inString:
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
		case c == '"':
			inString = true
		case c == '{' || c == '[':
			depth++
			if depth > deepest {
				deepest = depth
				if deepest > limit {
					return deepest
				}
			}
		case c == '}' || c == ']':
			depth = max(depth-1, 0)
		}
	}
	return deepest
}
