// Hand-computed checks of the CPU model of MPS itself (run by tests/test_mps.py): if these
// fail, every model comparison above them means nothing. Prints one "name: values" line per
// case; the Python test holds the expected numbers and where they come from.
import Foundation
@_spi(Sim) import Metal
@_spi(Sim) import MetalPerformanceShaders

final class Weights: NSObject, MPSCNNConvolutionDataSource {
    var w: [Float]
    var b: [Float]
    let d: MPSCNNConvolutionDescriptor
    init(_ d: MPSCNNConvolutionDescriptor, _ w: [Float], _ b: [Float]) { self.d = d; self.w = w; self.b = b }
    func dataType() -> MPSDataType { .float32 }
    func descriptor() -> MPSCNNConvolutionDescriptor { d }
    func weights() -> UnsafeMutableRawPointer { w.withUnsafeMutableBytes { $0.baseAddress! } }
    func biasTerms() -> UnsafeMutablePointer<Float>? { b.withUnsafeMutableBufferPointer { $0.baseAddress! } }
    func load() -> Bool { true }
    func purge() {}
    func label() -> String? { "w" }
    func copy(with zone: NSZone? = nil) -> Any { self }
}

final class Pads: NSObject, MPSNNPadding {
    let left: Int, top: Int, width: Int, height: Int
    init(left: Int, top: Int, width: Int, height: Int) { self.left = left; self.top = top; self.width = width; self.height = height }
    func paddingMethod() -> MPSNNPaddingMethod { .custom }
    func destinationImageDescriptor(forSourceImages sourceImages: [MPSImage], sourceStates: [MPSState]?, for kernel: MPSKernel,
                                    suggestedDescriptor inDescriptor: MPSImageDescriptor) -> MPSImageDescriptor {
        let k = kernel as! MPSCNNKernel
        k.offset = MPSOffset(x: (k.kernelWidth >> 1) - left, y: (k.kernelHeight >> 1) - top, z: 0)
        inDescriptor.width = width
        inDescriptor.height = height
        return inDescriptor
    }
    static var supportsSecureCoding: Bool { true }
    func encode(with coder: NSCoder) {}
    init?(coder: NSCoder) { return nil }
}

let device = MTLCreateSystemDefaultDevice()!

func image(_ w: Int, _ h: Int, _ c: Int, _ chw: [Float]) -> MPSImage {
    let im = MPSImage(device: device, imageDescriptor: MPSImageDescriptor(channelFormat: .float32, width: w, height: h, featureChannels: c))
    chw.withUnsafeBytes { im.writeBytes($0.baseAddress!, dataLayout: .featureChannelsxHeightxWidth, imageIndex: 0) }
    return im
}

func read(_ im: MPSImage) -> [Float] {
    var out = [Float](repeating: 0, count: im.width * im.height * im.featureChannels)
    out.withUnsafeMutableBytes { im.readBytes($0.baseAddress!, dataLayout: .featureChannelsxHeightxWidth, imageIndex: 0) }
    return out
}

func run(_ result: MPSNNImageNode, _ inputs: [MPSImage]) -> MPSImage {
    result.format = .float32
    let graph = MPSNNGraph(device: device, resultImage: result, resultImageIsNeeded: true)!
    let buffer = device.makeCommandQueue()!.makeCommandBuffer()!
    let out = graph.encode(to: buffer, sourceImages: inputs)!
    out.synchronize(on: buffer)  // MPSImage.h: before the CPU reads what the GPU wrote
    buffer.commit()
    buffer.waitUntilCompleted()
    return out
}

func show(_ name: String, _ v: [Float]) { print("\(name): " + v.map { String($0) }.joined(separator: " ")) }

// 1. Convolution: 1 -> 2 channels, 2x2 kernel, OHWI weights, pads top/left 1 (ONNX pads
//    [1, 1, 0, 0]) on a 3x3 image 1..9: output 3x3 per channel.
do {
    let d = MPSCNNConvolutionDescriptor(kernelWidth: 2, kernelHeight: 2, inputFeatureChannels: 1, outputFeatureChannels: 2)
    // OHWI: o0 = [[1, 0], [0, 0]] (picks the top-left tap), o1 = [[0, 0], [0, 1]] + bias 10.
    let w = Weights(d, [1, 0, 0, 0, 0, 0, 0, 1], [0, 10])
    let src = MPSNNImageNode(handle: nil)
    let conv = MPSCNNConvolutionNode(source: src, weights: w)
    conv.paddingPolicy = Pads(left: 1, top: 1, width: 3, height: 3)
    show("conv_ohwi_offset", read(run(conv.resultImage, [image(3, 3, 1, (1...9).map(Float.init))])))
}

// 2. Slices of 4: a 6-channel 1x1 image is 2 texture slices; channel 5 is slice 1, component 1.
do {
    let im = image(1, 1, 6, [0, 1, 2, 3, 4, 5])
    print("slices: \(im.simSlices) storage \(im.simStorage.map { String($0) }.joined(separator: " "))")
}

// 3. Concatenation of 3 + 2 channels: the second source starts at channel 4 (a gap at 3).
do {
    let a = MPSNNImageNode(handle: nil), b = MPSNNImageNode(handle: nil)
    let cat = MPSNNConcatenationNode(sources: [a, b])
    let out = run(cat.resultImage, [image(1, 1, 3, [1, 2, 3]), image(1, 1, 2, [7, 8])])
    show("concat_3_2 channels \(out.featureChannels)", read(out))
}

// 4. Max pooling 2x2 stride 2 with pads left/top 1 on a 3x3 image (.clamp ignores pads).
do {
    let src = MPSNNImageNode(handle: nil)
    let pool = MPSCNNPoolingMaxNode(source: src, kernelWidth: 2, kernelHeight: 2, strideInPixelsX: 2, strideInPixelsY: 2)
    final class P: NSObject, MPSNNPadding {
        func paddingMethod() -> MPSNNPaddingMethod { .custom }
        func destinationImageDescriptor(forSourceImages s: [MPSImage], sourceStates: [MPSState]?, for kernel: MPSKernel,
                                        suggestedDescriptor d: MPSImageDescriptor) -> MPSImageDescriptor {
            let k = kernel as! MPSCNNKernel
            k.offset = MPSOffset(x: 0, y: 0, z: 0)
            k.edgeMode = .clamp
            d.width = 2
            d.height = 2
            return d
        }
        static var supportsSecureCoding: Bool { true }
        func encode(with coder: NSCoder) {}
        override init() {}
        init?(coder: NSCoder) { return nil }
    }
    pool.paddingPolicy = P()
    show("maxpool_pad", read(run(pool.resultImage, [image(3, 3, 1, (1...9).map(Float.init))])))
}

// 5. Fused ReLU on a 1x1 convolution with weight -1: relu(-x).
do {
    let d = MPSCNNConvolutionDescriptor(kernelWidth: 1, kernelHeight: 1, inputFeatureChannels: 1, outputFeatureChannels: 1)
    d.fusedNeuronDescriptor = MPSNNNeuronDescriptor.cnnNeuronDescriptor(with: .reLU, a: 0, b: 0, c: 0)
    let src = MPSNNImageNode(handle: nil)
    let conv = MPSCNNConvolutionNode(source: src, weights: Weights(d, [-1], [0]))
    show("fused_relu", read(run(conv.resultImage, [image(2, 1, 1, [3, -2])])))
}

// 6. float16 intermediate images (MPSNNImageNode.format default) round values.
do {
    let src = MPSNNImageNode(handle: nil)
    let n = MPSCNNNeuronLinearNode(source: src, a: 1, b: 0)
    let graph = MPSNNGraph(device: device, resultImage: n.resultImage, resultImageIsNeeded: true)!
    let buffer = device.makeCommandQueue()!.makeCommandBuffer()!
    let out = graph.encode(to: buffer, sourceImages: [image(1, 1, 1, [1.0001])])!
    buffer.commit()
    print("float16_format: \(out.featureChannelFormat == .float16) \(out.simStorage[0])")
}

// 7. Reductions (MPSNNReduce.h: row = "for each row of an image" -> width 1, column = "for
//    each column" -> height 1) on a 3x2 (w x h) image [[1, 2, 3], [4, 5, 6]], 1 channel, and a
//    2-channel 1x1 image for the feature-channel and spatial mean nodes.
do {
    let src = MPSNNImageNode(handle: nil)
    let im = image(3, 2, 1, [1, 2, 3, 4, 5, 6])
    show("row_sum", read(run(MPSNNReductionRowSumNode(source: src).resultImage, [im])))
    show("column_max", read(run(MPSNNReductionColumnMaxNode(source: src).resultImage, [im])))
    show("spatial_mean", read(run(MPSNNReductionSpatialMeanNode(source: src).resultImage, [im])))
    let two = image(2, 1, 2, [1, 2, 10, 20])  // channel 0: [1, 2], channel 1: [10, 20]
    show("channels_min", read(run(MPSNNReductionFeatureChannelsMinNode(source: src).resultImage, [two])))
}

// 8. Several results (MPSNNGraph.h initWithDevice:resultImages:resultsAreNeeded:): the first
//    comes back from encode, the others through intermediateImages, named by
//    intermediateImageHandles.
do {
    final class H: NSObject, MPSHandle {
        let n: String
        init(_ n: String) { self.n = n }
        func label() -> String? { n }
        static var supportsSecureCoding: Bool { true }
        func encode(with coder: NSCoder) {}
        init?(coder: NSCoder) { return nil }
    }
    let src = MPSNNImageNode(handle: nil)
    let neg = MPSCNNNeuronLinearNode(source: src, a: -1, b: 0)
    let dbl = MPSCNNNeuronLinearNode(source: src, a: 2, b: 0)
    neg.resultImage.format = .float32
    dbl.resultImage.format = .float32
    dbl.resultImage.handle = H("double")
    dbl.resultImage.imageAllocator = MPSImage.defaultAllocator()  // else a temporary image
    var needed = [ObjCBool](repeating: true, count: 2)
    let graph = MPSNNGraph(device: device, resultImages: [neg.resultImage, dbl.resultImage], resultsAreNeeded: &needed)!
    let buffer = device.makeCommandQueue()!.makeCommandBuffer()!
    let exported = NSMutableArray()
    let first = graph.encode(to: buffer, sourceImages: [image(1, 1, 1, [3])], sourceStates: nil,
                             intermediateImages: exported, destinationStates: nil)!
    first.synchronize(on: buffer)
    (exported.object(at: 0) as! MPSImage).synchronize(on: buffer)
    buffer.commit()
    print("read_count: \(graph.readCountForSourceImage(at: 0))")
    let names = (graph.intermediateImageHandles ?? []).compactMap { $0.label() }
    print("two_results: \(read(first)[0]) \(names.joined()) \(read(exported.object(at: 0) as! MPSImage)[0])")
}

// 9. kernelWeightsDataType (MPSCNNConvolution.h, iOS 14 / macOS 11): unimplemented, the
//    weights are kept in float16; 1.0001 (not a float16) times 1 reads back 1 then.
do {
    final class F32: NSObject, MPSCNNConvolutionDataSource {
        var w: [Float] = [1.0001]
        var b: [Float] = [0]
        let d = MPSCNNConvolutionDescriptor(kernelWidth: 1, kernelHeight: 1, inputFeatureChannels: 1, outputFeatureChannels: 1)
        let keep: Bool
        init(keep: Bool) { self.keep = keep }
        func dataType() -> MPSDataType { .float32 }
        func kernelWeightsDataType() -> MPSDataType { keep ? .float32 : .float16 }
        func descriptor() -> MPSCNNConvolutionDescriptor { d }
        func weights() -> UnsafeMutableRawPointer { w.withUnsafeMutableBytes { $0.baseAddress! } }
        func biasTerms() -> UnsafeMutablePointer<Float>? { b.withUnsafeMutableBufferPointer { $0.baseAddress! } }
        func load() -> Bool { true }
        func purge() {}
        func label() -> String? { "f32" }
        func copy(with zone: NSZone? = nil) -> Any { self }
    }
    let d = MPSCNNConvolutionDescriptor(kernelWidth: 1, kernelHeight: 1, inputFeatureChannels: 1, outputFeatureChannels: 1)
    let src = MPSNNImageNode(handle: nil)
    let unimplemented = MPSCNNConvolutionNode(source: src, weights: Weights(d, [1.0001], [0]))
    let kept = MPSCNNConvolutionNode(source: src, weights: F32(keep: true))
    let x = [image(1, 1, 1, [1])]
    show("weights_type", [read(run(unimplemented.resultImage, x))[0], read(run(kept.resultImage, x))[0]])
}

// 10. LRN window (MPSCNNNormalization.h): kernelSize 2 sums channels [k - 1, k]; alpha 2
//     (alpha / N = 1), beta 1, delta 0 on channels [1, 2, 3]: k=0 -> 1/1, k=1 -> 2/5, k=2 -> 3/13.
do {
    let src = MPSNNImageNode(handle: nil)
    let lrn = MPSCNNCrossChannelNormalizationNode(source: src, kernelSize: 2)
    lrn.alpha = 2
    lrn.beta = 1
    lrn.delta = 0
    show("lrn_even", read(run(lrn.resultImage, [image(1, 1, 3, [1, 2, 3])])))
}

// 11. InstanceNorm without -epsilon uses FLT_MIN (MPSCNNInstanceNormalization.h): x = [0, 0.002]
//     (variance 1e-6) normalises to [-1, 1] (with 0.001 it would be about [-0.03, 0.03]).
do {
    final class IN: NSObject, MPSCNNInstanceNormalizationDataSource {
        var g: [Float] = [1], b: [Float] = [0]
        let numberOfFeatureChannels = 1
        override init() {}
        required init?(coder aDecoder: NSCoder) { return nil }
        func gamma() -> UnsafeMutablePointer<Float>? { g.withUnsafeMutableBufferPointer { $0.baseAddress! } }
        func beta() -> UnsafeMutablePointer<Float>? { b.withUnsafeMutableBufferPointer { $0.baseAddress! } }
        func label() -> String? { "in" }
        func copy(with zone: NSZone? = nil) -> Any { self }
    }
    let src = MPSNNImageNode(handle: nil)
    let norm = MPSCNNInstanceNormalizationNode(source: src, dataSource: IN())
    show("instnorm_eps", read(run(norm.resultImage, [image(2, 1, 1, [0, 0.002])])).map { ($0 * 1000).rounded() / 1000 })
}
