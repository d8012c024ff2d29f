package gateway

import (
	"io"
	"net/http"

	"github.com/rodon-compute/rodon/internal/httpapi"
)

// maxBody is the largest request body accepted.
const maxBody = 1 << 20

// decodeBody decodes the JSON object of r's body into v, strictly: at most
// maxBody bytes, no field v does not have, nothing after the object. An empty
// body is an error unless optional. The error is a 400 (413 over the limit)
// whose message names the field or the offset at fault.
func decodeBody(w http.ResponseWriter, r *http.Request, v any, optional bool) error {
	return decodeLimited(w, r, v, optional, maxBody)
}

// decodeBodyMax is decodeBody of a required body of at most limit bytes.
func decodeBodyMax(w http.ResponseWriter, r *http.Request, v any, limit int64) error {
	return decodeLimited(w, r, v, false, limit)
}

func decodeLimited(w http.ResponseWriter, r *http.Request, v any, optional bool, limit int64) error {
	return httpapi.Decode(w, r, v, limit, optional, "docs/GATEWAY.md")
}

// decodeJSON is decodeBody's decoder, without the HTTP limit; it is what
// the fuzz tests exercise.
func decodeJSON(r io.Reader, v any, optional bool) error {
	return httpapi.DecodeReader(r, v, optional, "docs/GATEWAY.md")
}
