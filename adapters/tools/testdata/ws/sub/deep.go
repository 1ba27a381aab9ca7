package sub

// TODO: deep thought
const Answer = 42
