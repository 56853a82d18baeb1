module residency/writer

go 1.26.0
