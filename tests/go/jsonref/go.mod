module jsonref

go 1.22
