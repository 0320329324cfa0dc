"""Documents: pure logic for the document index — which files are documents, chunking, keyword queries."""
