package catalog

import (
	"fmt"
	"sort"

	"go.mongodb.org/mongo-driver/bson"
	"go.mongodb.org/mongo-driver/bson/bsontype"
	"go.mongodb.org/mongo-driver/x/bsonx/bsoncore"
)

// StringMap is a map whose keys the caller chooses: Helm --set paths
// ("image.repository"), Kubernetes label keys ("app.kubernetes.io/name"),
// quota names.
// In JSON it is a plain object, as EMCO and k8splugin have it. In the
// document store it is a list of {k, v} pairs in key order, because such
// keys are not valid field names there (a "." or a leading "$" is refused,
// which used to answer 500). Documents written before, with the map as a
// subdocument, still load.
type StringMap map[string]string

var (
	_ bson.ValueMarshaler   = StringMap(nil)
	_ bson.ValueUnmarshaler = (*StringMap)(nil)
)

// MarshalBSONValue stores the map as [{k, v}, ...] in key order.
func (m StringMap) MarshalBSONValue() (bsontype.Type, []byte, error) {
	if m == nil {
		return bson.TypeNull, nil, nil
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	idx, arr := bsoncore.AppendArrayStart(nil)
	for i, k := range keys {
		didx, doc := bsoncore.AppendDocumentStart(nil)
		doc = bsoncore.AppendStringElement(doc, "k", k)
		doc = bsoncore.AppendStringElement(doc, "v", m[k])
		doc, _ = bsoncore.AppendDocumentEnd(doc, didx)
		arr = bsoncore.AppendDocumentElement(arr, fmt.Sprint(i), doc)
	}
	arr, err := bsoncore.AppendArrayEnd(arr, idx)
	return bson.TypeArray, arr, err
}

// UnmarshalBSONValue reads the pair list, or the subdocument of older
// documents.
func (m *StringMap) UnmarshalBSONValue(t bsontype.Type, data []byte) error {
	switch t {
	case bson.TypeNull, bson.TypeUndefined:
		*m = nil
		return nil
	case bson.TypeEmbeddedDocument:
		elems, err := bsoncore.Document(data).Elements()
		if err != nil {
			return fmt.Errorf("decode string map: %w", err)
		}
		out := make(StringMap, len(elems))
		for _, e := range elems {
			s, ok := e.Value().StringValueOK()
			if !ok {
				return fmt.Errorf("decode string map: %q is a %s, not a string", e.Key(), e.Value().Type)
			}
			out[e.Key()] = s
		}
		*m = out
		return nil
	case bson.TypeArray:
		values, err := bsoncore.Document(data).Values()
		if err != nil {
			return fmt.Errorf("decode string map: %w", err)
		}
		out := make(StringMap, len(values))
		for _, v := range values {
			doc, ok := v.DocumentOK()
			if !ok {
				return fmt.Errorf("decode string map: an entry is a %s, not a {k, v} document", v.Type)
			}
			k, kok := doc.Lookup("k").StringValueOK()
			val, vok := doc.Lookup("v").StringValueOK()
			if !kok || !vok {
				return fmt.Errorf("decode string map: an entry lacks a string k or v")
			}
			out[k] = val
		}
		*m = out
		return nil
	}
	return fmt.Errorf("decode string map: unexpected %s", t)
}
