// Package mongo opens Argus's metadata store through go.mongodb.org/mongo-driver:
// any MongoDB named by a URI or, when none is configured, an embedded FerretDB
// v1 (MongoDB wire protocol over SQLite, pure Go) on loopback with its data
// under a directory. FerretDB has no transactions or change streams; nothing
// in Argus depends on them.
//
//	st, err := mongo.Open(ctx, mongo.Options{DataDir: dir, Database: "argus"})
//	defer st.Close(ctx)
//	st.DB.Collection("projects")
package mongo
