// CPU model of the part of Apple's Metal framework that onnx2edge's generated MPSNNGraph code
// and the MetalPerformanceShaders model use. Type names and initialisers follow Apple's SDK
// (Metal/MTLDevice.h, MTLCommandQueue.h, MTLCommandBuffer.h, MTLTypes.h) so generated Swift
// compiles unchanged on Linux; nothing here touches a GPU.
//
// Semantics kept: work encoded into a command buffer runs only when the buffer is committed
// (MTLCommandBuffer.h: "commit ... Commit a command buffer so it can be executed as soon as
// possible"), completion handlers run after the work, waitUntilCompleted returns after that.

public struct MTLSize: Equatable {
    public var width: Int
    public var height: Int
    public var depth: Int
    public init() { width = 0; height = 0; depth = 0 }
    public init(width: Int, height: Int, depth: Int) {
        self.width = width
        self.height = height
        self.depth = depth
    }
}

public struct MTLOrigin: Equatable {
    public var x: Int
    public var y: Int
    public var z: Int
    public init() { x = 0; y = 0; z = 0 }
    public init(x: Int, y: Int, z: Int) {
        self.x = x
        self.y = y
        self.z = z
    }
}

public struct MTLRegion: Equatable {
    public var origin: MTLOrigin
    public var size: MTLSize
    public init() { origin = MTLOrigin(); size = MTLSize() }
    public init(origin: MTLOrigin, size: MTLSize) {
        self.origin = origin
        self.size = size
    }
}

public enum MTLCommandBufferStatus: UInt {
    case notEnqueued = 0, enqueued, committed, scheduled, completed, error
}

public protocol MTLDevice: AnyObject {
    var name: String { get }
    func makeCommandQueue() -> MTLCommandQueue?
}

public protocol MTLCommandQueue: AnyObject {
    var device: MTLDevice { get }
    var label: String? { get set }
    func makeCommandBuffer() -> MTLCommandBuffer?
}

public typealias MTLCommandBufferHandler = (MTLCommandBuffer) -> Void

public protocol MTLCommandBuffer: AnyObject {
    var device: MTLDevice { get }
    var commandQueue: MTLCommandQueue { get }
    var label: String? { get set }
    var status: MTLCommandBufferStatus { get }
    func commit()
    func waitUntilCompleted()
    func waitUntilScheduled()
    func addCompletedHandler(_ block: @escaping MTLCommandBufferHandler)
    /// Not part of Apple's protocol: how the CPU model of MPS enqueues its kernels.
    func simEnqueue(_ work: @escaping () -> Void)
}

/// The one CPU "device" of the model.
public final class SimDevice: MTLDevice {
    public let name = "onnx2edge CPU model of Metal (not a GPU)"
    public init() {}
    public func makeCommandQueue() -> MTLCommandQueue? { SimCommandQueue(device: self) }
}

public final class SimCommandQueue: MTLCommandQueue {
    public let device: MTLDevice
    public var label: String?
    init(device: MTLDevice) { self.device = device }
    public func makeCommandBuffer() -> MTLCommandBuffer? { SimCommandBuffer(queue: self) }
}

public final class SimCommandBuffer: MTLCommandBuffer {
    public let commandQueue: MTLCommandQueue
    public var device: MTLDevice { commandQueue.device }
    public var label: String?
    public private(set) var status: MTLCommandBufferStatus = .notEnqueued
    private var work: [() -> Void] = []
    private var handlers: [MTLCommandBufferHandler] = []

    init(queue: MTLCommandQueue) { commandQueue = queue }

    public func simEnqueue(_ work: @escaping () -> Void) {
        precondition(status == .notEnqueued, "encoding into a committed command buffer")
        self.work.append(work)
    }

    public func commit() {
        precondition(status == .notEnqueued, "command buffer committed twice")
        status = .committed
        for w in work { w() }
        work.removeAll()
        status = .completed
        for h in handlers { h(self) }
        handlers.removeAll()
    }

    public func waitUntilCompleted() {}
    public func waitUntilScheduled() {}
    public func addCompletedHandler(_ block: @escaping MTLCommandBufferHandler) {
        handlers.append(block)
    }
}

public func MTLCreateSystemDefaultDevice() -> MTLDevice? { SimDevice() }
