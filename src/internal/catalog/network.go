package catalog

import (
	"go.mongodb.org/mongo-driver/bson"
	"go.mongodb.org/mongo-driver/bson/bsontype"
)

var (
	_ bson.ValueMarshaler   = NetworkSpec(nil)
	_ bson.ValueUnmarshaler = (*NetworkSpec)(nil)
)

// MarshalBSONValue stores a network spec as JSON text: its keys are the
// caller's, and may hold dots, which field names must not.
func (n NetworkSpec) MarshalBSONValue() (bsontype.Type, []byte, error) {
	if n == nil {
		return bson.TypeNull, nil, nil
	}
	return jsonAsBSON(map[string]any(n))
}

// UnmarshalBSONValue reads what MarshalBSONValue wrote, or a subdocument
// stored before.
func (n *NetworkSpec) UnmarshalBSONValue(t bsontype.Type, data []byte) error {
	return jsonFromBSON(t, data, (*map[string]any)(n))
}
