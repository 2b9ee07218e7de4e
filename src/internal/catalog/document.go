package catalog

import (
	"encoding/json"
	"fmt"

	"go.mongodb.org/mongo-driver/bson"
	"go.mongodb.org/mongo-driver/bson/bsontype"
	"go.mongodb.org/mongo-driver/x/bsonx/bsoncore"
)

// Document is free-form JSON a caller stores and reads back as given
// (subscription metadata, k8splugin's other-connectivity-list, ncm network
// specs). Its keys, at any depth, are the caller's, and a "." or a leading
// "$" is not a valid field name in the document store, so it is stored as
// its JSON text. Documents stored before, as subdocuments, still load.
type Document map[string]any

var (
	_ bson.ValueMarshaler   = Document(nil)
	_ bson.ValueUnmarshaler = (*Document)(nil)
	_ bson.ValueMarshaler   = NetworkSpec(nil)
	_ bson.ValueUnmarshaler = (*NetworkSpec)(nil)
)

// MarshalBSONValue stores the document as its JSON text.
func (d Document) MarshalBSONValue() (bsontype.Type, []byte, error) { return marshalJSONText(d) }

// UnmarshalBSONValue reads JSON text, or the subdocument of older documents.
func (d *Document) UnmarshalBSONValue(t bsontype.Type, data []byte) error {
	m, err := unmarshalJSONText(t, data)
	*d = m
	return err
}

// MarshalBSONValue stores the spec as its JSON text, as Document does.
func (n NetworkSpec) MarshalBSONValue() (bsontype.Type, []byte, error) { return marshalJSONText(n) }

// UnmarshalBSONValue reads what MarshalBSONValue wrote, or a subdocument.
func (n *NetworkSpec) UnmarshalBSONValue(t bsontype.Type, data []byte) error {
	m, err := unmarshalJSONText(t, data)
	*n = m
	return err
}

func marshalJSONText[M ~map[string]any](m M) (bsontype.Type, []byte, error) {
	if m == nil {
		return bson.TypeNull, nil, nil
	}
	b, err := json.Marshal(map[string]any(m))
	if err != nil {
		return 0, nil, fmt.Errorf("encode document: %w", err)
	}
	return bson.TypeString, bsoncore.AppendString(nil, string(b)), nil
}

func unmarshalJSONText(t bsontype.Type, data []byte) (map[string]any, error) {
	switch t {
	case bson.TypeNull, bson.TypeUndefined:
		return nil, nil
	case bson.TypeString:
		s, _, ok := bsoncore.ReadString(data)
		if !ok {
			return nil, fmt.Errorf("decode document: malformed string")
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(s), &m); err != nil {
			return nil, fmt.Errorf("decode document: %w", err)
		}
		return m, nil
	case bson.TypeEmbeddedDocument:
		// Written before documents were stored as text: decode as the
		// JSON API would have given it.
		var m bson.M
		if err := bson.Unmarshal(data, &m); err != nil {
			return nil, fmt.Errorf("decode document: %w", err)
		}
		b, err := bson.MarshalExtJSON(m, false, false)
		if err != nil {
			return nil, fmt.Errorf("decode document: %w", err)
		}
		var out map[string]any
		if err := json.Unmarshal(b, &out); err != nil {
			return nil, fmt.Errorf("decode document: %w", err)
		}
		return out, nil
	}
	return nil, fmt.Errorf("decode document: unexpected %s", t)
}
